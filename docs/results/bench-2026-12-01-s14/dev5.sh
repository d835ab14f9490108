set -u
mkdir -p $OUT/r
T0=$(date +%s)
node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 10 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-agoq-nolimit.json 2> $OUT/r/dp-agoq-nolimit.log
echo "nolimit done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 6 --warmup 1 --mbps 20 --latency 20 > $OUT/r/dp-agoq-20.json 2> $OUT/r/dp-agoq-20.log
echo "20MBps done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
