set -u
mkdir -p $OUT/r
T0=$(date +%s)
node bench.mjs step --model base --scheme fp32,agoq,int8,int8-blockdw,switchback,agoq-int8 --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1
node bench.mjs step --model small --scheme fp32,int8,switchback,agoq-int8 --reps 10 --warmup 3 --json $OUT/r/step-small.json > $OUT/r/step-small.txt 2>&1
echo "step done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
python3 torch_baseline.py --from $OUT/r/step-base.json --config small-run.json --suites step --step-variants eager,fp32-sdpa,bf16-sdpa --reps 10 --warmup 5 --json $OUT/r/torch.json > $OUT/r/torch.log 2>&1
node bench.mjs report --input $OUT/r/step-base.json --baseline $OUT/r/torch.json > $OUT/r/step-base-vs-torch.txt 2>&1
node bench.mjs report --input $OUT/r/step-small.json --baseline $OUT/r/torch.json > $OUT/r/step-small-vs-torch.txt 2>&1
echo "torch done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 10 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-agoq-nolimit.json 2> $OUT/r/dp-agoq-nolimit.log
node dp-limiter.mjs --model small --batch 8 --scheme fp32 --modes fp32,int8 --peers 2 --steps 10 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-fp32-nolimit.json 2> $OUT/r/dp-fp32-nolimit.log
node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 6 --warmup 1 --mbps 20 --latency 20 > $OUT/r/dp-agoq-20.json 2> $OUT/r/dp-agoq-20.log
echo "dp done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
for sc in int8 agoq-int8; do
  node train.mjs --model small --batch 32 --seq 256 --steps 600 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/$sc --checkpoint-every 0 --eval-every 100 --eval-batches 20 > $OUT/r/train-$sc.log 2>&1
  cp /tmp/runs/$sc/metrics.jsonl $OUT/r/metrics-$sc.jsonl; cp /tmp/runs/$sc/run.json $OUT/r/run-$sc.json
done
echo "fidelity done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
