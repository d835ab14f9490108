set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 70 node bench.mjs step --model base --scheme int8,agoq-int8,fp32 --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 30 node bench.mjs step --model base --scheme int8 --reps 10 --warmup 3 --i8-split-max 1 --json $OUT/r/step-base-nosplit.json > $OUT/r/step-base-nosplit.txt 2>&1; t step-nosplit
LEFT=$(( 590 - ($(date +%s) - T0) ))
echo "fidelity budget $LEFT s" >> $OUT/r/times.txt
for sc in int8 agoq-int8; do
  timeout $LEFT node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/$sc --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-$sc.log 2>&1 &
done
wait; t fidelity
for sc in int8 agoq-int8; do cp /tmp/runs/$sc/metrics.jsonl $OUT/r/metrics-base-$sc.jsonl; cp /tmp/runs/$sc/run.json $OUT/r/run-base-$sc.json 2>/dev/null; done
cd $OUT && tar czf r.tgz r && rm -rf r
