mkdir -p $OUT/final2
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/final2/gpu.txt 2>&1
timeout 150 node bench.mjs gemm --sizes 1024,2048,4096,8192 --variants pick --model base --json $OUT/final2/gemm.json > $OUT/final2/gemm.log 2>&1; echo gemm rc=$?
timeout 100 node bench.mjs qgemm --sizes 4096,8192 --model none --json $OUT/final2/qgemm.json > $OUT/final2/qgemm.log 2>&1; echo qgemm rc=$?
timeout 170 node bench.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/final2/step.json > $OUT/final2/step.log 2>&1; echo step rc=$?
for s in gemm qgemm step; do timeout 100 python3 torch_baseline.py --from $OUT/final2/$s.json --json $OUT/final2/torch_$s.json > $OUT/final2/torch_$s.log 2>&1; echo torch $s rc=$?; done
for s in gemm qgemm step; do node bench.mjs report --input $OUT/final2/$s.json --baseline $OUT/final2/torch_$s.json --json $OUT/final2/merged_$s.json > $OUT/final2/table_$s.txt 2>&1; done
cat $OUT/final2/table_gemm.txt $OUT/final2/table_qgemm.txt $OUT/final2/table_step.txt | cut -c1-220
cd $OUT && tar czf final2.tgz final2 && rm -rf final2
