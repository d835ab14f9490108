mkdir -p $OUT/s8j
date -u > $OUT/s8j/date.txt
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active --format=csv -lms 20 > $OUT/s8j/smi.csv 2>&1 &
SMI=$!
date +%s.%N > $OUT/s8j/t0.txt
timeout 100 node bench15.mjs step --model base --scheme fp32 --reps 30 --json $OUT/s8j/step.json > $OUT/s8j/step.log 2>&1; echo step rc=$?
date +%s.%N > $OUT/s8j/t1.txt
kill $SMI
grep "^step" $OUT/s8j/step.log | cut -c1-120
python3 - <<PY
import csv
rows=list(csv.reader(open('$OUT/s8j/smi.csv')))
print(rows[0])
clk=[r[1].strip() for r in rows[1:] if len(r)>6]
from collections import Counter
print('sm clocks', Counter(clk).most_common(6))
print('throttle', Counter(r[6].strip() for r in rows[1:] if len(r)>6).most_common(6))
pw=[float(r[3].split()[0]) for r in rows[1:] if len(r)>6 and r[3].strip()[0].isdigit()]
print('power max', max(pw), 'n', len(pw))
PY
cd $OUT && tar czf s8j.tgz s8j && rm -rf s8j
