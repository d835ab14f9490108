mkdir -p $OUT/s10e
date -u > $OUT/s10e/date.txt
cat rev.txt > $OUT/s10e/rev.txt
V1=128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_st264,128x128k8_8x16
for d in none noCopy2 noPost none noCopy2 noPost; do
SK_DIAG=$d timeout 100 node bench20.mjs gemm --sizes 4096 --model none --variants $V1 --json $OUT/s10e/$d.json > $OUT/s10e/$d.log 2>&1; echo $d rc=$?
grep -h "gemm 4096" $OUT/s10e/$d.log | cut -c1-120
done
cd $OUT && tar czf s10e.tgz s10e && rm -rf s10e
