mkdir -p $OUT/s7c
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np
for i in 1 2; do
timeout 100 node gemm_ceiling7a.mjs --rounds 3 --modes none --probes none > $OUT/s7c/ceiling_a$i.log 2>&1; echo ceiling a rc=$?
timeout 100 node gemm_ceiling7.mjs --rounds 3 --modes none --probes none --put-k 2,3,4,5,6 > $OUT/s7c/ceiling_b$i.log 2>&1; echo ceiling b rc=$?
done
grep -h "TFLOP\|differ" $OUT/s7c/ceiling_*.log
timeout 200 node gemm_tune7.mjs --variants $V --budget-s 170 --json $OUT/s7c/gemm_tune.json > $OUT/s7c/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/s7c/gemm_tune.log
grep "every candidate" -A3 $OUT/s7c/gemm_tune.log | cut -c1-500
cd $OUT && tar czf s7c.tgz s7c && rm -rf s7c
