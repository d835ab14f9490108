mkdir -p $OUT/s7g
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s7g/gpu.txt 2>&1
date -u > $OUT/s7g/date.txt
timeout 130 node bench7.mjs gemm --sizes 2048,4096,8192 --variants pick --model base --json $OUT/s7g/gemm.json > $OUT/s7g/gemm.log 2>&1; echo gemm rc=$?
timeout 80 node bench7.mjs qgemm --sizes 4096,8192 --model none --json $OUT/s7g/qgemm.json > $OUT/s7g/qgemm.log 2>&1; echo qgemm rc=$?
timeout 160 node bench7.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s7g/step.json > $OUT/s7g/step.log 2>&1; echo step rc=$?
for s in gemm qgemm step; do timeout 80 python3 torch_baseline.py --from $OUT/s7g/$s.json --json $OUT/s7g/torch_$s.json > $OUT/s7g/torch_$s.log 2>&1; echo torch $s rc=$?; done
for s in gemm qgemm step; do node bench7.mjs report --input $OUT/s7g/$s.json --baseline $OUT/s7g/torch_$s.json --json $OUT/s7g/merged_$s.json > $OUT/s7g/table_$s.txt 2>&1; done
cat $OUT/s7g/table_gemm.txt $OUT/s7g/table_qgemm.txt $OUT/s7g/table_step.txt | cut -c1-200
timeout 100 node step_profile7.mjs --model base --scheme fp32 --host --chunk 64,128 --json $OUT/s7g/prof.json > $OUT/s7g/prof.log 2>&1; echo prof rc=$?
head -12 $OUT/s7g/prof.log; grep host $OUT/s7g/prof.log
cd $OUT && tar czf s7g.tgz s7g && rm -rf s7g
