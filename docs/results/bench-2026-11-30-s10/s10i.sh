mkdir -p $OUT/s10i
date -u > $OUT/s10i/date.txt
cat rev.txt > $OUT/s10i/rev.txt
for i in 1 2; do
timeout 120 node gemm_dispatches.mjs --shape 4096x4096x4096 --choices 128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_sk2,128x128k8_8x16_st2048 > $OUT/s10i/d4096_$i.log 2>&1; echo d4096 $i rc=$?
grep "ms," $OUT/s10i/d4096_$i.log
done
timeout 150 node gemm_dispatches.mjs --shape 8192x8192x8192 --choices 128x128k8_8x16,128x128k8_8x16_st264 --reps 10 > $OUT/s10i/d8192.log 2>&1; echo d8192 rc=$?
grep "ms," $OUT/s10i/d8192.log
cd $OUT && tar czf s10i.tgz s10i && rm -rf s10i
