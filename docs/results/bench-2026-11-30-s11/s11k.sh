mkdir -p $OUT/s11k
date -u > $OUT/s11k/date.txt
cat rev.txt > $OUT/s11k/rev.txt
timeout 160 node bench30.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s11k/step.json > $OUT/s11k/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s11k/step.json --json $OUT/s11k/torch_step.json > $OUT/s11k/torch_step.log 2>&1; echo torch rc=$?
node bench30.mjs report --input $OUT/s11k/step.json --baseline $OUT/s11k/torch_step.json --json $OUT/s11k/merged_step.json > $OUT/s11k/table_step.txt 2>&1
cut -c1-200 $OUT/s11k/table_step.txt
V=128x128k8_8x16_ia_st264,128x128k8_8x16_ia,128x128k8_8x16
for i in 1 2; do
timeout 80 node bench30.mjs gemm --sizes 4096 --model none --variants $V --json $OUT/s11k/gemm_$i.json > $OUT/s11k/gemm_$i.log 2>&1; echo gemm $i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s11k/gemm_$i.json --json $OUT/s11k/torch_gemm_$i.json > $OUT/s11k/torch_gemm_$i.log 2>&1; echo torch $i rc=$?
node bench30.mjs report --input $OUT/s11k/gemm_$i.json --baseline $OUT/s11k/torch_gemm_$i.json --json $OUT/s11k/merged_gemm_$i.json > $OUT/s11k/table_gemm_$i.txt 2>&1
grep 4096 $OUT/s11k/table_gemm_$i.txt | cut -c1-170
done
cd $OUT && tar czf s11k.tgz s11k && rm -rf s11k
