set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 170 node bench.mjs step --model base --scheme fp32,int8,int8-qk,agoq-int8,agoq-int8-qk --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 60 node step-profile.mjs --model base --scheme int8-qk --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
LEFT=$(( 500 - ($(date +%s) - T0) ))
echo "fidelity budget $LEFT s" >> $OUT/r/times.txt
for sc in fp32 int8 int8-qk agoq-int8 agoq-int8-qk; do
  timeout $LEFT node train.mjs --model small --batch 32 --seq 256 --steps 600 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/$sc --checkpoint-every 0 --eval-every 100 --eval-batches 20 > $OUT/r/train-small-$sc.log 2>&1 &
done
wait; t fidelity
for sc in fp32 int8 int8-qk agoq-int8 agoq-int8-qk; do cp /tmp/runs/$sc/metrics.jsonl $OUT/r/metrics-small-$sc.jsonl; cp /tmp/runs/$sc/run.json $OUT/r/run-small-$sc.json 2>/dev/null; done
cd $OUT && tar czf r.tgz r && rm -rf r
