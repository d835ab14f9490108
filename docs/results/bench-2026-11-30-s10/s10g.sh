mkdir -p $OUT/s10g
date -u > $OUT/s10g/date.txt
git_rev=$(cat rev.txt 2>/dev/null); echo "$git_rev" > $OUT/s10g/rev.txt
V1=128x128k8_8x16,128x128k8_8x16_st264,128x128k8_8x16_st132
V2=128x128k8_8x16_st132,128x128k8_8x16_st264,128x128k8_8x16
for i in 1 2; do
timeout 100 node bench22.mjs gemm --sizes 4096 --model none --variants $V1 --json $OUT/s10g/a${i}.json > $OUT/s10g/a${i}.log 2>&1; echo a$i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10g/a${i}.json --json $OUT/s10g/torch_a${i}.json > $OUT/s10g/torch_a${i}.log 2>&1; echo torch $i rc=$?
timeout 100 node bench22.mjs gemm --sizes 4096 --model none --variants $V2 --json $OUT/s10g/b${i}.json > $OUT/s10g/b${i}.log 2>&1; echo b$i rc=$?
grep -h "gemm 4096" $OUT/s10g/a${i}.log $OUT/s10g/b${i}.log | cut -c1-120
grep -o '"value": [0-9.]*' $OUT/s10g/torch_a${i}.json
done
timeout 150 node bench22.mjs gemm --sizes 8192 --model base --variants 128x128k8_8x16,128x128k8_8x16_st264 --json $OUT/s10g/model.json > $OUT/s10g/model.log 2>&1; echo model rc=$?
grep "  gemm" $OUT/s10g/model.log | cut -c1-120
cd $OUT && tar czf s10g.tgz s10g && rm -rf s10g
