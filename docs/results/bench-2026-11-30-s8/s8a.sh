mkdir -p $OUT/s8a
date -u > $OUT/s8a/date.txt
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np
timeout 200 node gemm_tune8.mjs --variants $V --models base --budget-s 180 --json $OUT/s8a/gemm_tune.json > $OUT/s8a/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/s8a/gemm_tune.log | cut -c1-100
for b in bench7 bench8 bench7 bench8; do
timeout 100 node $b.mjs step --model base --scheme fp32 --reps 20 --json $OUT/s8a/step_$b.json > $OUT/s8a/step_$b.log 2>&1; echo $b rc=$?
grep -i "tokens/s\|ms" $OUT/s8a/step_$b.log | cut -c1-160 | head -4
done
cd $OUT && tar czf s8a.tgz s8a && rm -rf s8a
