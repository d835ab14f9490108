mkdir -p $OUT/s8i
date -u > $OUT/s8i/date.txt
timeout 160 node bench15.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s8i/step.json > $OUT/s8i/step.log 2>&1; echo step rc=$?
timeout 80 python3 torch_baseline.py --from $OUT/s8i/step.json --json $OUT/s8i/torch_step.json > $OUT/s8i/torch_step.log 2>&1; echo torch rc=$?
node bench15.mjs report --input $OUT/s8i/step.json --baseline $OUT/s8i/torch_step.json --json $OUT/s8i/merged_step.json > $OUT/s8i/table_step.txt 2>&1
cut -c1-200 $OUT/s8i/table_step.txt
timeout 100 node step_profile15.mjs --model base --scheme fp32 --host --json $OUT/s8i/prof.json > $OUT/s8i/prof.log 2>&1; echo prof rc=$?
head -5 $OUT/s8i/prof.log; grep "Di\b\|attnBwdDi\|host" $OUT/s8i/prof.log
cd $OUT && tar czf s8i.tgz s8i && rm -rf s8i
