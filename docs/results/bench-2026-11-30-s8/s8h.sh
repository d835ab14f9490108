mkdir -p $OUT/s8h
date -u > $OUT/s8h/date.txt
for i in 1 2 3 4; do
timeout 60 node bench14.mjs gemm --sizes 4096 --variants pick --model none --json $OUT/s8h/gemm_$i.json > $OUT/s8h/gemm_$i.log 2>&1; echo gemm $i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s8h/gemm_$i.json --json $OUT/s8h/torch_gemm_$i.json > $OUT/s8h/torch_gemm_$i.log 2>&1; echo torch $i rc=$?
node bench14.mjs report --input $OUT/s8h/gemm_$i.json --baseline $OUT/s8h/torch_gemm_$i.json --json $OUT/s8h/merged_gemm_$i.json > $OUT/s8h/table_gemm_$i.txt 2>&1
grep 4096 $OUT/s8h/table_gemm_$i.txt | cut -c1-160
done
cd $OUT && tar czf s8h.tgz s8h && rm -rf s8h
