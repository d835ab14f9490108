set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 110 node bench.mjs step --model base --scheme fp32,int8,int8-qk,agoq-int8,agoq-int8-qk --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 40 python3 torch_baseline.py --from $OUT/r/step-base.json --config small-run.json --suites step --step-variants eager,fp32-sdpa,bf16-sdpa --reps 10 --warmup 5 --json $OUT/r/torch.json > $OUT/r/torch.log 2>&1; t torch
timeout 5 node bench.mjs report --input $OUT/r/step-base.json --baseline $OUT/r/torch.json > $OUT/r/step-base-vs-torch.txt 2>&1
timeout 30 node step-profile.mjs --model base --scheme int8-qk --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
cd $OUT && tar czf r.tgz r && rm -rf r
