mkdir -p $OUT/s8c
date -u > $OUT/s8c/date.txt
V=128x128k8_8x16,128x128k8_8x16_np,128x256k8_8x16,256x128k8_8x8,64x64k16_8x8,128x128k16_8x8,128x128k16_8x8_np,128x128k8_8x8_np,64x64k16_4x4
timeout 230 node gemm_tune10.mjs --variants $V --models base --stream-k 132,264,396,528,1056 --budget-s 200 --json $OUT/s8c/gemm_tune.json > $OUT/s8c/gemm_tune.log 2>&1; echo tune rc=$?
grep -i "verif" $OUT/s8c/gemm_tune.log | head -5
sed -n '/^shape /,/^$/p' $OUT/s8c/gemm_tune.log | cut -c1-110
timeout 100 node step_profile10.mjs --model base --scheme fp32 --host --json $OUT/s8c/prof.json > $OUT/s8c/prof.log 2>&1; echo prof rc=$?
grep "norm\|summed\|class\|host" $OUT/s8c/prof.log
timeout 100 node --trace-gc bench10.mjs step --model base --scheme fp32 --reps 20 --json $OUT/s8c/step_gc.json > $OUT/s8c/step_gc.log 2>&1; echo stepgc rc=$?
grep -c "Scavenge\|Mark" $OUT/s8c/step_gc.log; grep "tokens/s" $OUT/s8c/step_gc.log | tail -2
cd $OUT && tar czf s8c.tgz s8c && rm -rf s8c
