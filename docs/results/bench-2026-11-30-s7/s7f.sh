mkdir -p $OUT/s7f
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np
for v in gc_A gemm_ceiling7; do
timeout 100 node $v.mjs --rounds 2 --modes none --probes none --variants 128x128k8_8x8,128x256k8_8x16,128x128k16_8x8 > $OUT/s7f/$v.log 2>&1; echo $v rc=$?
grep "TFLOP\|differ" $OUT/s7f/$v.log | cut -c1-80
done
timeout 200 node gemm_tune7.mjs --variants $V --budget-s 170 --json $OUT/s7f/gemm_tune.json > $OUT/s7f/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/s7f/gemm_tune.log | cut -c1-60
grep "every candidate" -A3 $OUT/s7f/gemm_tune.log | cut -c1-400
cd $OUT && tar czf s7f.tgz s7f && rm -rf s7f
