set -u
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/r/gpu.txt
python3 torch_baseline.py --config base-run.json --config small-run.json --suites step --step-variants all --reps 10 --warmup 5 --json $OUT/r/torch-steps.json 2> $OUT/r/torch-steps.log
for tk in char bpe:512 bpe:2048; do
  n=${tk/:/}
  /usr/bin/time -v node train.mjs --model small --steps 600 --tokenizer $tk --data tinyshakespeare.txt --out /tmp/runs/$n --checkpoint-every 0 --eval-every 100 --eval-batches 20 > $OUT/r/train-$n.log 2>&1
  cp /tmp/runs/$n/metrics.jsonl $OUT/r/metrics-$n.jsonl; cp /tmp/runs/$n/run.json $OUT/r/run-$n.json
done
cd $OUT && tar czf r.tgz r && rm -rf r
