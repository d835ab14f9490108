set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 80 node bench.mjs step --model base --scheme fp32,int8,agoq-int8,agoq-int8-shared --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 45 node bench.mjs step --model base --scheme fp32,int8 --reps 10 --warmup 3 --attn-dq recompute --json $OUT/r/step-base-recompute.json > $OUT/r/step-base-recompute.txt 2>&1; t step-recompute
timeout 30 node bench.mjs step --model base --scheme int8 --reps 10 --warmup 3 --i8tc-layout 1 --json $OUT/r/step-base-epi4.json > $OUT/r/step-base-epi4.txt 2>&1; t step-epi4
timeout 60 python3 torch_baseline.py --from $OUT/r/step-base.json --config small-run.json --suites step --step-variants eager,fp32-sdpa,bf16-sdpa --reps 10 --warmup 5 --json $OUT/r/torch.json > $OUT/r/torch.log 2>&1; t torch
timeout 20 node bench.mjs report --input $OUT/r/step-base.json --baseline $OUT/r/torch.json > $OUT/r/step-base-vs-torch.txt 2>&1
timeout 100 node attn-tune.mjs --shapes 16x512x12x64 --passes ds --ff 2560 --reps 5 --json $OUT/r/attn-ds.json > $OUT/r/attn-ds.txt 2>&1; t attn-ds
timeout 60 node i8tc-tune.mjs --sizes 4096 --shapes 8192x768x768,8192x2560x768,8192x768x2560,8192x768x5120,768x768x8192,2560x768x8192,768x2560x8192 --reps 5 --json $OUT/r/i8tc.json > $OUT/r/i8tc.txt 2>&1; t i8tc
timeout 40 node i8-splitk.mjs --model base --json $OUT/r/i8-splitk.json > $OUT/r/i8-splitk.txt 2>&1; t splitk
timeout 40 node step-profile.mjs --model base --scheme int8 --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
cd $OUT && tar czf r.tgz r && rm -rf r
