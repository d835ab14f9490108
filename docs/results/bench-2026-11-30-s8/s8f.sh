mkdir -p $OUT/s8f
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s8f/gpu.txt 2>&1
date -u > $OUT/s8f/date.txt
timeout 130 node bench13.mjs gemm --sizes 2048,4096,8192 --variants pick --model base --json $OUT/s8f/gemm.json > $OUT/s8f/gemm.log 2>&1; echo gemm rc=$?
timeout 80 node bench13.mjs qgemm --sizes 4096,8192 --model none --json $OUT/s8f/qgemm.json > $OUT/s8f/qgemm.log 2>&1; echo qgemm rc=$?
timeout 160 node bench13.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s8f/step.json > $OUT/s8f/step.log 2>&1; echo step rc=$?
for s in gemm qgemm step; do timeout 80 python3 torch_baseline.py --from $OUT/s8f/$s.json --json $OUT/s8f/torch_$s.json > $OUT/s8f/torch_$s.log 2>&1; echo torch $s rc=$?; done
for s in gemm qgemm step; do node bench13.mjs report --input $OUT/s8f/$s.json --baseline $OUT/s8f/torch_$s.json --json $OUT/s8f/merged_$s.json > $OUT/s8f/table_$s.txt 2>&1; done
cat $OUT/s8f/table_gemm.txt $OUT/s8f/table_qgemm.txt $OUT/s8f/table_step.txt | cut -c1-200
timeout 100 node step_profile13.mjs --model base --scheme fp32 --host --json $OUT/s8f/prof.json > $OUT/s8f/prof.log 2>&1; echo prof rc=$?
head -12 $OUT/s8f/prof.log; grep host $OUT/s8f/prof.log
cd $OUT && tar czf s8f.tgz s8f && rm -rf s8f
