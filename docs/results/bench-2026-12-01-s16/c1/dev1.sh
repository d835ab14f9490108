set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/r/gpu.txt 2>&1
timeout 120 node bench.mjs step --model base --scheme fp32,int8,agoq-int8,agoq-int8-shared,switchback --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 120 node step-profile.mjs --model base --scheme int8,agoq-int8 --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
timeout 360 node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme fp32 --data tinyshakespeare.txt --out /tmp/runs/fp32 --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-fp32.log 2>&1; t train-fp32
cp /tmp/runs/fp32/metrics.jsonl $OUT/r/metrics-base-fp32.jsonl; cp /tmp/runs/fp32/run.json $OUT/r/run-base-fp32.json
cd $OUT && tar czf r.tgz r && rm -rf r
