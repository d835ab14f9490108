mkdir -p $OUT/tune6
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np,128x64k8_8x16,64x128k8_8x16
timeout 230 node gemm_tune.mjs --variants $V --budget-s 200 --json $OUT/tune6/gemm_tune.json > $OUT/tune6/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/tune6/gemm_tune.log
cd $OUT && tar czf tune6.tgz tune6 && rm -rf tune6
