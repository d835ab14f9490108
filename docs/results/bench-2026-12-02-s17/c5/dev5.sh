set -u
xz -dkf train.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
timeout 370 node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme fp32 --seed 2 --data tinyshakespeare.txt --out /tmp/runs/fp32s2 --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-base-fp32-seed2.log 2>&1
echo "fidelity done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cp /tmp/runs/fp32s2/metrics.jsonl $OUT/r/metrics-base-fp32-seed2.jsonl
cd $OUT && tar czf r.tgz r && rm -rf r
