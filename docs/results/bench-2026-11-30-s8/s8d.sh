mkdir -p $OUT/s8d
date -u > $OUT/s8d/date.txt
for b in bench10 bench11 bench10 bench11; do
timeout 100 node --trace-gc $b.mjs step --model base --scheme fp32 --reps 20 --json $OUT/s8d/step_$b.json > $OUT/s8d/step_$b.log 2>&1; echo $b rc=$?
echo "mark-compacts $(grep -c Mark-Compact $OUT/s8d/step_$b.log) scavenges $(grep -c Scavenge $OUT/s8d/step_$b.log)"
grep "^step" $OUT/s8d/step_$b.log | cut -c1-120
done
timeout 80 python3 torch_baseline.py --from $OUT/s8d/step_bench11.json --json $OUT/s8d/torch_step.json > $OUT/s8d/torch_step.log 2>&1; echo torch rc=$?
grep -i "tokens\|ms" $OUT/s8d/torch_step.log | tail -3
cd $OUT && tar czf s8d.tgz s8d && rm -rf s8d
