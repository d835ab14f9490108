set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 150 node bench.mjs step --model base --scheme fp32,int8,int8-qk,agoq-int8,agoq-int8-qk --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 60 node bench.mjs step --model base --scheme int8-qk --attn-i8-tc force --reps 10 --warmup 3 --json $OUT/r/step-base-tc.json > $OUT/r/step-base-tc.txt 2>&1; t step-tc
timeout 70 node step-profile.mjs --model base --scheme int8-qk --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
cd $OUT && tar czf r.tgz r && rm -rf r
