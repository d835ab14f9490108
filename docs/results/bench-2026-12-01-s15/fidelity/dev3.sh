set -u
for f in *.mjs.xz; do xz -dkf "$f"; done
mkdir -p $OUT/r/prof
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
timeout 45 node --cpu-prof --cpu-prof-dir=$OUT/r/prof dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2 --steps 8 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-nolimit.json 2> $OUT/r/dp-nolimit.log; t dp-prof
(cd $OUT/r/prof && for f in *.cpuprofile; do gzip $f; done)
timeout 470 node group-fidelity.mjs --model small --data tinyshakespeare.txt --members 4 --diloco 50 --wire int8 --streaming 5 --mbps 20 --latency 20 --steps 600 --eval-every 50 > $OUT/r/fidelity-4.json 2> $OUT/r/fidelity-4.log; t fidelity-4
cd $OUT && tar czf r.tgz r && rm -rf r
