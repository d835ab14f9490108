mkdir -p $OUT/s11f
date -u > $OUT/s11f/date.txt
for i in 1 2; do for L in none z ld; do
  for s in 8192x768x768:128x128k8_8x16,128x128k8_8x8,64x64k16_8x8 8192x768x2560:128x128k8_8x16,128x128k8_8x16_st264 16384x384x384:128x128k8_8x16 16384x1024x384:128x128k8_8x16 8192x2560x768:128x128k8_8x16; do
    shape=${s%%:*}; ch=${s#*:}
    MATMUL_LEAN=$L timeout 100 node gemm_dispatches.mjs --shape $shape --choices $ch --reps 10 > $OUT/s11f/${shape}_${L}_$i.log 2>&1; echo "$shape $L $i rc=$? $(grep 'ms,' $OUT/s11f/${shape}_${L}_$i.log | sed 's/; largest.*//' | tr '\n' ' ')"
  done
done; done
cd $OUT && tar czf s11f.tgz s11f && rm -rf s11f
