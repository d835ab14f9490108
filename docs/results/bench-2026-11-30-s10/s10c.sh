mkdir -p $OUT/s10c
date -u > $OUT/s10c/date.txt
git_rev=$(cat rev.txt 2>/dev/null); echo "$git_rev" > $OUT/s10c/rev.txt
V1=128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_st132,128x128k8_8x16_st528
V2=128x128k8_8x16_st528,128x128k8_8x16_st132,128x128k8_8x16_st264,128x128k8_8x16
for i in 1 2; do
timeout 100 node bench18.mjs gemm --sizes 4096 --model none --variants $V1 --json $OUT/s10c/a${i}.json > $OUT/s10c/a${i}.log 2>&1; echo a$i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10c/a${i}.json --json $OUT/s10c/torch_a${i}.json > $OUT/s10c/torch_a${i}.log 2>&1; echo torch $i rc=$?
timeout 100 node bench18.mjs gemm --sizes 4096 --model none --variants $V2 --json $OUT/s10c/b${i}.json > $OUT/s10c/b${i}.log 2>&1; echo b$i rc=$?
grep -h "gemm 4096" $OUT/s10c/a${i}.log $OUT/s10c/b${i}.log | cut -c1-120
grep -o '"value": [0-9.]*' $OUT/s10c/torch_a${i}.json
done
timeout 150 node bench18.mjs gemm --sizes 8192 --model base --variants 128x128k8_8x16,128x128k8_8x16_st264 --json $OUT/s10c/model.json > $OUT/s10c/model.log 2>&1; echo model rc=$?
grep "  gemm" $OUT/s10c/model.log | cut -c1-120
cd $OUT && tar czf s10c.tgz s10c && rm -rf s10c
