mkdir -p $OUT/s10b
date -u > $OUT/s10b/date.txt
git_rev=$(cat rev.txt 2>/dev/null); echo "$git_rev" > $OUT/s10b/rev.txt
V1=128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_st132,128x128k8_8x16_st528
V2=128x128k8_8x16_st528,128x128k8_8x16_st132,128x128k8_8x16_st264,128x128k8_8x16
for i in 1 2; do
timeout 100 node bench17.mjs gemm --sizes 4096 --model none --variants $V1 --json $OUT/s10b/a${i}.json > $OUT/s10b/a${i}.log 2>&1; echo a$i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10b/a${i}.json --json $OUT/s10b/torch_a${i}.json > $OUT/s10b/torch_a${i}.log 2>&1; echo torch $i rc=$?
timeout 100 node bench17.mjs gemm --sizes 4096 --model none --variants $V2 --json $OUT/s10b/b${i}.json > $OUT/s10b/b${i}.log 2>&1; echo b$i rc=$?
grep -h "gemm 4096" $OUT/s10b/a${i}.log $OUT/s10b/b${i}.log | cut -c1-120
grep -o '"value": [0-9.]*' $OUT/s10b/torch_a${i}.json
done
timeout 150 node bench17.mjs gemm --sizes 2048,8192 --model base --variants 128x128k8_8x16,128x128k8_8x16_st264 --json $OUT/s10b/model.json > $OUT/s10b/model.log 2>&1; echo model rc=$?
grep "  gemm" $OUT/s10b/model.log | cut -c1-120
cd $OUT && tar czf s10b.tgz s10b && rm -rf s10b
