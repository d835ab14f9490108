set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 150 node attn-tune.mjs --shapes 16x512x12x64 --passes ds --ff 2560 --reps 5 --json $OUT/r/attn-ds.json > $OUT/r/attn-ds.txt 2>&1; t attn-ds
timeout 100 node bench.mjs step --model base --scheme fp32,int8-attn,agoq-int8-attn --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 40 python3 torch_baseline.py --from $OUT/r/step-base.json --config small-run.json --suites step --step-variants eager,fp32-sdpa,bf16-sdpa --reps 10 --warmup 5 --json $OUT/r/torch.json > $OUT/r/torch.log 2>&1; t torch
timeout 5 node bench.mjs report --input $OUT/r/step-base.json --baseline $OUT/r/torch.json > $OUT/r/step-base-vs-torch.txt 2>&1
timeout 30 node step-profile.mjs --model base --scheme int8-attn --json $OUT/r/profile-int8-attn.json > $OUT/r/profile-int8-attn.txt 2>&1; t profile-int8
timeout 30 node step-profile.mjs --model base --scheme fp32 --json $OUT/r/profile-fp32.json > $OUT/r/profile-fp32.txt 2>&1; t profile-fp32
LEFT=$(( 560 - ($(date +%s) - T0) ))
echo "fidelity budget $LEFT s" >> $OUT/r/times.txt
for sc in fp32 int8-attn; do
  timeout $LEFT node train.mjs --model small --batch 32 --seq 256 --steps 600 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/s-$sc --checkpoint-every 0 --eval-every 100 --eval-batches 20 > $OUT/r/train-small-$sc.log 2>&1 &
done
wait; t fidelity-small
for sc in fp32 int8-attn; do cp /tmp/runs/s-$sc/metrics.jsonl $OUT/r/metrics-small-$sc.jsonl; cp /tmp/runs/s-$sc/run.json $OUT/r/run-small-$sc.json 2>/dev/null; done
cd $OUT && tar czf r.tgz r && rm -rf r
