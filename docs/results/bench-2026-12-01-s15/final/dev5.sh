set -u
for f in *.mjs.xz; do xz -dkf "$f"; done
[ -f node_modules/@roamhq/wrtc-linux-x64/wrtc.node ] || xz -dk node_modules/@roamhq/wrtc-linux-x64/wrtc.node.xz
mkdir -p $OUT/r
T0=$(date +%s)
t() { echo "$1 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt; }
D="node dp-limiter.mjs --model small --batch 8 --scheme agoq --modes int8 --peers 2"
timeout 40 $D --steps 10 --warmup 2 --mbps 100000 --latency 0 --bucket-floats 1048576 > $OUT/r/dp-nolimit-b1m.json 2> $OUT/r/dp-nolimit-b1m.log; t dp-nolimit-b1m
timeout 40 $D --steps 10 --warmup 2 --mbps 100000 --latency 0 --bucket-floats 1048576 --no-overlap > $OUT/r/dp-nolimit-b1m-nooverlap.json 2> $OUT/r/dp-nolimit-b1m-nooverlap.log; t dp-nolimit-nooverlap
timeout 40 $D --steps 10 --warmup 2 --mbps 100000 --latency 0 > $OUT/r/dp-nolimit.json 2> $OUT/r/dp-nolimit.log; t dp-nolimit
timeout 50 $D --steps 6 --warmup 1 --mbps 20 --latency 20 --bucket-floats 1048576 > $OUT/r/dp-20-b1m.json 2> $OUT/r/dp-20-b1m.log; t dp-20
timeout 40 node bench-new.mjs step --model small --batch 8 --scheme agoq,fp32 --reps 10 --warmup 3 --json $OUT/r/lone-small-b8.json > $OUT/r/lone-small-b8.txt 2>&1; t lone-b8
timeout 40 node bench-new.mjs step --model small --scheme fp32 --reps 10 --warmup 3 --json $OUT/r/lone-small-b64.json > $OUT/r/lone-small-b64.txt 2>&1; t lone-b64
timeout 80 bash two.sh /tmp/p-dp small 30 int8; t two-dp
timeout 70 bash two.sh /tmp/p-dp20 small 12 int8 --link 20:20; t two-dp20
for d in p-dp p-dp20; do mkdir -p $OUT/r/$d; cp /tmp/$d/*.log $OUT/r/$d/; cp /tmp/$d/a/metrics.jsonl $OUT/r/$d/a-metrics.jsonl; cp /tmp/$d/b/metrics.jsonl $OUT/r/$d/b-metrics.jsonl; done 2>/dev/null
timeout 90 node diloco-limiter.mjs --model small --members 4 --diloco 50 --wire int8 --streaming 5 --overlap 9 --mbps 20 --latency 20 --rounds 2 --warmup 1 --lone 20 > $OUT/r/diloco-s5-o9.json 2> $OUT/r/diloco-s5-o9.log; t diloco
cd $OUT && tar czf r1.tgz r
cd - >/dev/null
timeout 230 node group-fidelity.mjs --model small --data public/data/tinyshakespeare.txt --members 2 --diloco 50 --wire int8 --streaming 5 --overlap 9 --mbps 20 --latency 20 --steps 600 --eval-every 50 > $OUT/r/fidelity-2.json 2> $OUT/r/fidelity-2.log; t fidelity-2
cd $OUT && tar czf r.tgz r && rm -rf r
