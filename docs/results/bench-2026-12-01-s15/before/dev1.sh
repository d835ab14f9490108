set -u
mkdir -p $OUT/r/prof
T0=$(date +%s)
timeout 60 node bench-new.mjs step --model small --batch 8 --scheme agoq,fp32 --reps 10 --warmup 3 --json $OUT/r/lone-small-b8.json > $OUT/r/lone-small-b8.txt 2>&1
echo "lone done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
timeout 90 node --cpu-prof --cpu-prof-dir=$OUT/r/prof dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 8 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-nolimit.json 2> $OUT/r/dp-nolimit.log
echo "dp done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
timeout 110 node tp-limiter.mjs --model base --batch 1 --seq 256 --degrees 2,4 --mbps 125 --latency 0.5 --steps 3 --warmup 1 > $OUT/r/tp-lan.json 2> $OUT/r/tp-lan.log
echo "tp done at $(( $(date +%s) - T0 )) s (rc $?)" >> $OUT/r/times.txt
timeout 60 node bench-new.mjs step --model base --batch 1 --seq 256 --scheme fp32 --reps 10 --warmup 3 --json $OUT/r/lone-base-1x256.json > $OUT/r/lone-base-1x256.txt 2>&1
echo "lone base done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
