mkdir -p $OUT/s10j
date -u > $OUT/s10j/date.txt
cat rev.txt > $OUT/s10j/rev.txt
for i in 1 2; do
timeout 120 node gemm_dispatches.mjs --shape 4096x4096x4096 --choices 128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_sk2 > $OUT/s10j/d4096_$i.log 2>&1; echo d4096 $i rc=$?
grep "ms," $OUT/s10j/d4096_$i.log
done
timeout 120 node gemm_dispatches.mjs --shape 2048x2048x8192 --choices 128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_sk2 > $OUT/s10j/d2048.log 2>&1; echo d2048 rc=$?
grep "ms," $OUT/s10j/d2048.log
timeout 150 node gemm_dispatches.mjs --shape 8192x8192x8192 --choices 128x128k8_8x16,128x128k8_8x16_st264 --reps 10 > $OUT/s10j/d8192.log 2>&1; echo d8192 rc=$?
grep "ms," $OUT/s10j/d8192.log
cd $OUT && tar czf s10j.tgz s10j && rm -rf s10j
