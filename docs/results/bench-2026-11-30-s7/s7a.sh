mkdir -p $OUT/s7a
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s7a/gpu.txt 2>&1
timeout 100 node attn_tune.mjs --shapes 16x512x12x64 --json $OUT/s7a/attn_old.json > $OUT/s7a/attn_old.log 2>&1; echo attn old rc=$?
timeout 120 node attn_tune7.mjs --shapes 16x512x12x64 --json $OUT/s7a/attn_new.json > $OUT/s7a/attn_new.log 2>&1; echo attn new rc=$?
grep "^best" $OUT/s7a/attn_old.log $OUT/s7a/attn_new.log
timeout 170 node bench7.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s7a/step.json > $OUT/s7a/step.log 2>&1; echo step rc=$?
timeout 100 python3 torch_baseline.py --from $OUT/s7a/step.json --json $OUT/s7a/torch_step.json > $OUT/s7a/torch_step.log 2>&1; echo torch rc=$?
node bench7.mjs report --input $OUT/s7a/step.json --baseline $OUT/s7a/torch_step.json --json $OUT/s7a/merged_step.json > $OUT/s7a/table_step.txt 2>&1
cut -c1-220 $OUT/s7a/table_step.txt
timeout 120 node step_profile7.mjs --model base --scheme fp32 --json $OUT/s7a/prof.json > $OUT/s7a/prof.log 2>&1; echo prof rc=$?
head -50 $OUT/s7a/prof.log
cd $OUT && tar czf s7a.tgz s7a && rm -rf s7a
