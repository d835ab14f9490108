set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 80 node bench.mjs step --model base --scheme fp32,int8,agoq-int8,agoq-int8-shared --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 30 node bench.mjs step --model base --scheme int8,agoq-int8 --reps 10 --warmup 3 --tq-variant direct4 --json $OUT/r/step-direct4.json > $OUT/r/step-direct4.txt 2>&1; t direct4
timeout 50 node step-profile.mjs --model base --scheme int8 --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
LEFT=$(( 585 - ($(date +%s) - T0) ))
echo "fidelity budget $LEFT s" >> $OUT/r/times.txt
timeout $LEFT node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme agoq-int8 --data tinyshakespeare.txt --out /tmp/runs/agoq-int8 --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-agoq-int8.log 2>&1
t fidelity
cp /tmp/runs/agoq-int8/metrics.jsonl $OUT/r/metrics-base-agoq-int8.jsonl; cp /tmp/runs/agoq-int8/run.json $OUT/r/run-base-agoq-int8.json 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
