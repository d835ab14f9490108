mkdir -p $OUT/ss1
timeout 200 node gemm_ceiling.mjs --rounds 3 --probes none --modes none --variants 128x128k8_8x16_ss,128x128k8_8x8_ss,128x128k8_8x8 > $OUT/ss1/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ss1/ceiling.log
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np,128x128k8_8x16_ss,128x128k8_8x8_ss
timeout 260 node gemm_tune.mjs --variants $V --budget-s 220 --json $OUT/ss1/gemm_tune.json > $OUT/ss1/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/ss1/gemm_tune.log
grep "every candidate" -A1 $OUT/ss1/gemm_tune.log | cut -c1-600
cd $OUT && tar czf ss1.tgz ss1 && rm -rf ss1
