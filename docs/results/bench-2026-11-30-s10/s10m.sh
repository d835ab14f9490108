mkdir -p $OUT/s10m
date -u > $OUT/s10m/date.txt
cat rev.txt > $OUT/s10m/rev.txt
timeout 160 node bench25.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s10m/step.json > $OUT/s10m/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s10m/step.json --json $OUT/s10m/torch_step.json > $OUT/s10m/torch_step.log 2>&1; echo torch rc=$?
node bench25.mjs report --input $OUT/s10m/step.json --baseline $OUT/s10m/torch_step.json --json $OUT/s10m/merged_step.json > $OUT/s10m/table_step.txt 2>&1
cut -c1-200 $OUT/s10m/table_step.txt
for i in 1 2; do
timeout 60 node bench25.mjs gemm --sizes 4096 --variants pick --model none --json $OUT/s10m/gemm_$i.json > $OUT/s10m/gemm_$i.log 2>&1; echo gemm $i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10m/gemm_$i.json --json $OUT/s10m/torch_gemm_$i.json > $OUT/s10m/torch_gemm_$i.log 2>&1; echo torch $i rc=$?
node bench25.mjs report --input $OUT/s10m/gemm_$i.json --baseline $OUT/s10m/torch_gemm_$i.json --json $OUT/s10m/merged_gemm_$i.json > $OUT/s10m/table_gemm_$i.txt 2>&1
grep 4096 $OUT/s10m/table_gemm_$i.txt | cut -c1-160
done
cd $OUT && tar czf s10m.tgz s10m && rm -rf s10m
