mkdir -p $OUT/s11h
date -u > $OUT/s11h/date.txt
cat rev.txt > $OUT/s11h/rev.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s11h/gpu.txt 2>&1
V=128x128k8_8x16_ia_st264,128x128k8_8x16_ia,128x128k8_8x16
for i in 1 2 3 4; do
timeout 80 node bench27.mjs gemm --sizes 4096 --model none --variants $V --json $OUT/s11h/gemm_$i.json > $OUT/s11h/gemm_$i.log 2>&1; echo gemm $i rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s11h/gemm_$i.json --json $OUT/s11h/torch_gemm_$i.json > $OUT/s11h/torch_gemm_$i.log 2>&1; echo torch $i rc=$?
node bench27.mjs report --input $OUT/s11h/gemm_$i.json --baseline $OUT/s11h/torch_gemm_$i.json --json $OUT/s11h/merged_gemm_$i.json > $OUT/s11h/table_gemm_$i.txt 2>&1
grep 4096 $OUT/s11h/table_gemm_$i.txt | cut -c1-170
done
timeout 160 node bench27.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s11h/step.json > $OUT/s11h/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s11h/step.json --json $OUT/s11h/torch_step.json > $OUT/s11h/torch_step.log 2>&1; echo torch rc=$?
node bench27.mjs report --input $OUT/s11h/step.json --baseline $OUT/s11h/torch_step.json --json $OUT/s11h/merged_step.json > $OUT/s11h/table_step.txt 2>&1
cut -c1-200 $OUT/s11h/table_step.txt
timeout 120 node bench27.mjs gemm --sizes 2048,8192 --model base --variants pick --json $OUT/s11h/model.json > $OUT/s11h/model.log 2>&1; echo model rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s11h/model.json --json $OUT/s11h/torch_model.json > $OUT/s11h/torch_model.log 2>&1; echo torch rc=$?
node bench27.mjs report --input $OUT/s11h/model.json --baseline $OUT/s11h/torch_model.json --json $OUT/s11h/merged_model.json > $OUT/s11h/table_model.txt 2>&1
cut -c1-170 $OUT/s11h/table_model.txt | tail -25
cd $OUT && tar czf s11h.tgz s11h && rm -rf s11h
