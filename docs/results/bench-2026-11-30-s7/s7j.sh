mkdir -p $OUT/s7j
date -u > $OUT/s7j/date.txt
timeout 160 node bench7.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s7j/step.json > $OUT/s7j/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s7j/step.json --json $OUT/s7j/torch_step.json > $OUT/s7j/torch_step.log 2>&1; echo torch rc=$?
node bench7.mjs report --input $OUT/s7j/step.json --baseline $OUT/s7j/torch_step.json --json $OUT/s7j/merged_step.json > $OUT/s7j/table_step.txt 2>&1
cut -c1-200 $OUT/s7j/table_step.txt
timeout 100 node step_profile7.mjs --model base --scheme fp32 --host --chunk 128 --json $OUT/s7j/prof.json > $OUT/s7j/prof.log 2>&1; echo prof rc=$?
head -8 $OUT/s7j/prof.log; grep host $OUT/s7j/prof.log
cd $OUT && tar czf s7j.tgz s7j && rm -rf s7j
