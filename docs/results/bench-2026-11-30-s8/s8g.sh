mkdir -p $OUT/s8g
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s8g/gpu.txt 2>&1
date -u > $OUT/s8g/date.txt
timeout 130 node bench14.mjs gemm --sizes 2048,4096,8192 --variants pick --model base --json $OUT/s8g/gemm.json > $OUT/s8g/gemm.log 2>&1; echo gemm rc=$?
timeout 80 node bench14.mjs qgemm --sizes 4096,8192 --model none --json $OUT/s8g/qgemm.json > $OUT/s8g/qgemm.log 2>&1; echo qgemm rc=$?
timeout 160 node bench14.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s8g/step.json > $OUT/s8g/step.log 2>&1; echo step rc=$?
for s in gemm qgemm step; do timeout 80 python3 torch_baseline.py --from $OUT/s8g/$s.json --json $OUT/s8g/torch_$s.json > $OUT/s8g/torch_$s.log 2>&1; echo torch $s rc=$?; done
for s in gemm qgemm step; do node bench14.mjs report --input $OUT/s8g/$s.json --baseline $OUT/s8g/torch_$s.json --json $OUT/s8g/merged_$s.json > $OUT/s8g/table_$s.txt 2>&1; done
cat $OUT/s8g/table_gemm.txt $OUT/s8g/table_qgemm.txt $OUT/s8g/table_step.txt | cut -c1-200
timeout 100 node step_profile14.mjs --model base --scheme fp32 --host --json $OUT/s8g/prof.json > $OUT/s8g/prof.log 2>&1; echo prof rc=$?
head -12 $OUT/s8g/prof.log; grep host $OUT/s8g/prof.log
cd $OUT && tar czf s8g.tgz s8g && rm -rf s8g
