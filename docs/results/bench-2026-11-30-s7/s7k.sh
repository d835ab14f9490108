mkdir -p $OUT/s7k
date -u > $OUT/s7k/date.txt
timeout 160 node bench7.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s7k/step.json > $OUT/s7k/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s7k/step.json --json $OUT/s7k/torch_step.json > $OUT/s7k/torch_step.log 2>&1; echo torch rc=$?
node bench7.mjs report --input $OUT/s7k/step.json --baseline $OUT/s7k/torch_step.json --json $OUT/s7k/merged_step.json > $OUT/s7k/table_step.txt 2>&1
cut -c1-200 $OUT/s7k/table_step.txt
cd $OUT && tar czf s7k.tgz s7k && rm -rf s7k
