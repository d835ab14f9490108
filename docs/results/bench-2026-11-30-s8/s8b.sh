mkdir -p $OUT/s8b
date -u > $OUT/s8b/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv > $OUT/s8b/gpu.txt 2>&1
timeout 100 node bench9.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s8b/step.json > $OUT/s8b/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s8b/step.json --json $OUT/s8b/torch_step.json > $OUT/s8b/torch_step.log 2>&1; echo torch rc=$?
node bench9.mjs report --input $OUT/s8b/step.json --baseline $OUT/s8b/torch_step.json --json $OUT/s8b/merged_step.json > $OUT/s8b/table_step.txt 2>&1
cut -c1-200 $OUT/s8b/table_step.txt
timeout 100 node step_profile9.mjs --model base --scheme fp32 --host --json $OUT/s8b/prof.json > $OUT/s8b/prof.log 2>&1; echo prof rc=$?
head -30 $OUT/s8b/prof.log; grep host $OUT/s8b/prof.log
V=128x192k8_8x16,192x128k8_8x16,128x128k16_8x8,128x128k16_8x8_np,128x128k8_8x8,128x128k8_8x8_np,256x128k8_8x8,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k8_8x16,128x128k8_8x16_np
timeout 200 node gemm_tune9.mjs --variants $V --models base --budget-s 170 --json $OUT/s8b/gemm_tune.json > $OUT/s8b/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/s8b/gemm_tune.log | cut -c1-100
cd $OUT && tar czf s8b.tgz s8b && rm -rf s8b
