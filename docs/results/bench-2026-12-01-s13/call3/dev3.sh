set -u
mkdir -p $OUT/r
T0=$(date +%s)
node exchange.mjs --model small --scheme agoq --members 2,4 --batch 8 --steps 20 --warmup 3 > $OUT/r/ex-agoq.json 2> $OUT/r/ex-agoq.log
node exchange.mjs --model small --scheme fp32 --members 2,4 --batch 8 --steps 20 --warmup 3 > $OUT/r/ex-fp32.json 2> $OUT/r/ex-fp32.log
echo "exchange done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
node diloco-limiter.mjs --model small --members 4 --diloco 50 --wire int8 --mbps 20 --latency 20 --batch 8 --rounds 2 --warmup 1 --lone 20 --dp-peers 2 > $OUT/r/diloco.json 2> $OUT/r/diloco.log
node diloco-limiter.mjs --model small --members 4 --diloco 50 --wire int8 --streaming 5 --mbps 20 --latency 20 --batch 8 --rounds 2 --warmup 1 --lone 0 > $OUT/r/diloco-stream.json 2> $OUT/r/diloco-stream.log
echo "diloco done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
for sc in fp32 int8 agoq-int8; do
  node train.mjs --model small --batch 32 --seq 256 --steps 600 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/$sc --checkpoint-every 0 --eval-every 100 --eval-batches 20 > $OUT/r/train-$sc.log 2>&1
  cp /tmp/runs/$sc/metrics.jsonl $OUT/r/metrics-$sc.jsonl; cp /tmp/runs/$sc/run.json $OUT/r/run-$sc.json
done
echo "fidelity done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
