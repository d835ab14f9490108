set -u
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 60 node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 10 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-nolimit.json 2> $OUT/r/dp-nolimit.log; t dp-nolimit
timeout 60 node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 6 --warmup 1 --mbps 20 --latency 20 > $OUT/r/dp-20.json 2> $OUT/r/dp-20.log; t dp-20
timeout 40 node bench-new.mjs step --model small --batch 8 --scheme agoq,fp32 --reps 10 --warmup 3 --json $OUT/r/lone-small-b8.json > $OUT/r/lone-small-b8.txt 2>&1; t lone-small
timeout 90 node diloco-limiter.mjs --model small --members 4 --diloco 50 --wire int8 --streaming 5 --mbps 20 --latency 20 --rounds 2 --warmup 1 --lone 20 > $OUT/r/diloco-s5.json 2> $OUT/r/diloco-s5.log; t diloco
timeout 90 node bench-new.mjs step --model base --scheme fp32,int8,agoq-int8,agoq --reps 10 --warmup 3 --json $OUT/r/step-base.json > $OUT/r/step-base.txt 2>&1; t step-base
timeout 150 node tp-limiter.mjs --model base --batch 1 --seq 256 --degrees 2,4 --mbps 125 --latency 0.5 --steps 3 --warmup 1 > $OUT/r/tp-lan.json 2> $OUT/r/tp-lan.log; t tp-lan
cd $OUT && tar czf r.tgz r && rm -rf r
