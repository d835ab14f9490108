mkdir -p $OUT/s8e
date -u > $OUT/s8e/date.txt
for f in "" "--max-semi-space-size=64" "" "--max-semi-space-size=64"; do
n=$( [ -z "$f" ] && echo plain || echo semi64 )
timeout 100 node --trace-gc $f bench12.mjs step --model base --scheme fp32 --reps 20 --json $OUT/s8e/step_$n.json > $OUT/s8e/step_$n.log 2>&1; echo $n rc=$?
echo "mark-compacts $(grep -c Mark-Compact $OUT/s8e/step_$n.log) scavenges $(grep -c Scavenge $OUT/s8e/step_$n.log)"
grep "^step" $OUT/s8e/step_$n.log | cut -c1-120
python3 -c "
import json,sys
d=json.load(open('$OUT/s8e/step_$n.json'))
for r in d['rows']:
  s=(r.get('detail') or {}).get('samplesMs')
  if s: print(' '.join(str(round(x)) for x in sorted(s)))
"
done
timeout 80 python3 torch_baseline.py --from $OUT/s8e/step_plain.json --json $OUT/s8e/torch_step.json > $OUT/s8e/torch_step.log 2>&1; echo torch rc=$?
grep -i "tokens/s" $OUT/s8e/torch_step.log | tail -2
python3 -c "
import json
d=json.load(open('$OUT/s8e/torch_step.json'))
for r in d['rows']: print(r['ms'], sorted(round(x,1) for x in r['samples_ms']))
"
cd $OUT && tar czf s8e.tgz s8e && rm -rf s8e
