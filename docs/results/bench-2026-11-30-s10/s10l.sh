mkdir -p $OUT/s10l
date -u > $OUT/s10l/date.txt
cat rev.txt > $OUT/s10l/rev.txt
timeout 160 node bench24.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s10l/step.json > $OUT/s10l/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s10l/step.json --json $OUT/s10l/torch_step.json > $OUT/s10l/torch_step.log 2>&1; echo torch rc=$?
node bench24.mjs report --input $OUT/s10l/step.json --baseline $OUT/s10l/torch_step.json --json $OUT/s10l/merged_step.json > $OUT/s10l/table_step.txt 2>&1
cut -c1-200 $OUT/s10l/table_step.txt
for i in 1 2; do
timeout 60 node bench24.mjs gemm --sizes 4096 --variants pick --model none --json $OUT/s10l/gemm_$i.json > $OUT/s10l/gemm_$i.log 2>&1; echo gemm $i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10l/gemm_$i.json --json $OUT/s10l/torch_gemm_$i.json > $OUT/s10l/torch_gemm_$i.log 2>&1; echo torch $i rc=$?
node bench24.mjs report --input $OUT/s10l/gemm_$i.json --baseline $OUT/s10l/torch_gemm_$i.json --json $OUT/s10l/merged_gemm_$i.json > $OUT/s10l/table_gemm_$i.txt 2>&1
grep 4096 $OUT/s10l/table_gemm_$i.txt | cut -c1-160
done
cd $OUT && tar czf s10l.tgz s10l && rm -rf s10l
