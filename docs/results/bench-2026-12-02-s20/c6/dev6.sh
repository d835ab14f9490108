set -u
xz -dkf train.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
timeout 420 node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme fp32 --data tinyshakespeare.txt --out /tmp/runs/b-fp32 --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-base-fp32.log 2>&1
echo "fidelity-base-fp32 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cp /tmp/runs/b-fp32/metrics.jsonl $OUT/r/metrics-base-fp32.jsonl; cp /tmp/runs/b-fp32/run.json $OUT/r/run-base-fp32.json 2>/dev/null
cd $OUT && tar czf r.tgz r && rm -rf r
