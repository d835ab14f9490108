mkdir -p $OUT/s7b
V=128x128k16_8x8,128x128k16_8x8_np,128x128k8_4x8,128x128k8_8x8,128x128k8_8x8_np,128x128k8_8x8_sw8,256x128k8_8x8,32x32k16_4x4,64x64k16_4x4,64x64k16_8x8,128x256k8_8x16,128x128k16_8x16,128x128k8_8x16,128x128k8_8x16_np
for i in 1 2; do
timeout 100 node gemm_ceiling.mjs --rounds 3 --modes lds_unroll:eng --probes none --engine-orders loop > $OUT/s7b/ceiling_old$i.log 2>&1; echo ceiling old rc=$?
timeout 100 node gemm_ceiling7.mjs --rounds 3 --modes lds_unroll:eng --probes none --engine-orders loop --variants 128x256k8_8x16,128x128k16_8x8 > $OUT/s7b/ceiling_new$i.log 2>&1; echo ceiling new rc=$?
done
grep -h "TFLOP" $OUT/s7b/ceiling_*.log
grep -h "differ" $OUT/s7b/ceiling_new1.log
timeout 150 node bench7.mjs gemm --sizes 2048,4096,8192 --variants pick --model base --json $OUT/s7b/gemm.json > $OUT/s7b/gemm.log 2>&1; echo gemm rc=$?
timeout 100 python3 torch_baseline.py --from $OUT/s7b/gemm.json --json $OUT/s7b/torch_gemm.json > $OUT/s7b/torch_gemm.log 2>&1; echo torch rc=$?
node bench7.mjs report --input $OUT/s7b/gemm.json --baseline $OUT/s7b/torch_gemm.json --json $OUT/s7b/merged_gemm.json > $OUT/s7b/table_gemm.txt 2>&1
cut -c1-200 $OUT/s7b/table_gemm.txt
timeout 200 node gemm_tune7.mjs --variants $V --budget-s 170 --json $OUT/s7b/gemm_tune.json > $OUT/s7b/gemm_tune.log 2>&1; echo tune rc=$?
sed -n '/^shape /,/^$/p' $OUT/s7b/gemm_tune.log
grep "every candidate" -A1 $OUT/s7b/gemm_tune.log | cut -c1-500
cd $OUT && tar czf s7b.tgz s7b && rm -rf s7b
