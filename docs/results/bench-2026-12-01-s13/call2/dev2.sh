set -u
mkdir -p $OUT/r
export LAB_T0=$(date +%s)
node bench.mjs step --model base --scheme fp32,agoq,int8,switchback,agoq-int8 --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1
node bench.mjs step --model small --scheme fp32,int8,agoq-int8 --reps 10 --warmup 3 --json $OUT/r/step-small.json > $OUT/r/step-small.txt 2>&1
echo "step benches done at $(( $(date +%s) - LAB_T0 )) s" >> $OUT/r/times.txt
python3 torch_baseline.py --from $OUT/r/step-base.json --config small-run.json --suites step --step-variants eager,fp32-sdpa,bf16-sdpa --reps 10 --warmup 5 --json $OUT/r/torch.json > $OUT/r/torch.log 2>&1
echo "torch done at $(( $(date +%s) - LAB_T0 )) s" >> $OUT/r/times.txt
node bench.mjs report --input $OUT/r/step-base.json --baseline $OUT/r/torch.json > $OUT/r/step-base-vs-torch.txt 2>&1
node bench.mjs report --input $OUT/r/step-small.json --baseline $OUT/r/torch.json > $OUT/r/step-small-vs-torch.txt 2>&1
node bench.mjs generate --model small --json $OUT/r/generate-small.json > $OUT/r/generate-small.txt 2>&1
echo "generate done at $(( $(date +%s) - LAB_T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
