mkdir -p $OUT/tune7
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np
timeout 260 node gemm_tune.mjs --variants $V --budget-s 220 --json $OUT/tune7/gemm_tune.json > $OUT/tune7/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/tune7/gemm_tune.log
grep "every candidate" -A1 $OUT/tune7/gemm_tune.log | cut -c1-500
timeout 120 node gemm_ceiling.mjs --rounds 3 --modes lds:eng,lds_unroll:eng --probes none --engine-orders loop > $OUT/tune7/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/tune7/ceiling.log
cd $OUT && tar czf tune7.tgz tune7 && rm -rf tune7
