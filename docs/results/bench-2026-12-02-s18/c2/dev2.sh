set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 170 node bench.mjs step --model base --scheme fp32,int8,int8-qk,agoq-int8,agoq-int8-qk --attn-i8-tc force --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 90 node bench.mjs step --model base --scheme int8,agoq-int8 --weight-codes per-gemm --reps 10 --warmup 3 --json $OUT/r/step-base-pergemm.json > $OUT/r/step-base-pergemm.txt 2>&1; t step-pergemm
timeout 70 node step-profile.mjs --model base --scheme int8-qk --attn-i8-tc force --json $OUT/r/profile.json > $OUT/r/profile.txt 2>&1; t profile
cd $OUT && tar czf r.tgz r && rm -rf r
