mkdir -p $OUT/final
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/final/gpu.txt 2>&1
timeout 150 node bench.mjs gemm --sizes 1024,2048,4096,8192 --variants pick --model base --json $OUT/final/gemm.json > $OUT/final/gemm.log 2>&1; echo gemm rc=$?
timeout 100 node bench.mjs qgemm --sizes 4096,8192 --model none --json $OUT/final/qgemm.json > $OUT/final/qgemm.log 2>&1; echo qgemm rc=$?
timeout 100 node bench.mjs codec --sizes 4194304,16777216,67108864 --json $OUT/final/codec.json > $OUT/final/codec.log 2>&1; echo codec rc=$?
timeout 170 node bench.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/final/step.json > $OUT/final/step.log 2>&1; echo step rc=$?
for s in gemm qgemm step; do timeout 100 python3 torch_baseline.py --from $OUT/final/$s.json --json $OUT/final/torch_$s.json > $OUT/final/torch_$s.log 2>&1; echo torch $s rc=$?; done
for s in gemm qgemm codec step; do node bench.mjs report --input $OUT/final/$s.json $( [ -f $OUT/final/torch_$s.json ] && echo --baseline $OUT/final/torch_$s.json ) --json $OUT/final/merged_$s.json > $OUT/final/table_$s.txt 2>&1; done
grep -E "^TACO n=" $OUT/final/codec.log | sed 's/; warm-up.*//'
cat $OUT/final/table_gemm.txt $OUT/final/table_qgemm.txt $OUT/final/table_step.txt | cut -c1-220
cd $OUT && tar czf final.tgz final && rm -rf final
