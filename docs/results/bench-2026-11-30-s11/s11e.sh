mkdir -p $OUT/s11e
date -u > $OUT/s11e/date.txt
for L in none z ld; do
  MATMUL_LEAN=$L timeout 150 node bench26.mjs gemm --sizes 4096 --model base --variants pick --json $OUT/s11e/gemm_$L.json > $OUT/s11e/gemm_$L.log 2>&1; echo "gemm $L rc=$?"
done
for L in none z ld none z ld; do
  MATMUL_LEAN=$L timeout 100 node gemm_dispatches.mjs --shape 4096x4096x4096 --choices 128x128k8_8x16,128x128k8_8x8,256x128k8_8x8,128x256k8_8x16,128x128k8_8x16_st264 --reps 10 > $OUT/s11e/sq_$L.log 2>&1; echo "sq $L rc=$? $(grep 'ms,' $OUT/s11e/sq_$L.log | sed 's/; largest.*//' | tr '\n' ' ')"
done
cd $OUT && tar czf s11e.tgz s11e && rm -rf s11e
