set -u
for f in group-fidelity.mjs.xz; do xz -dkf "$f"; done
mkdir -p $OUT/r
timeout 380 node group-fidelity.mjs --model small --data public/data/tinyshakespeare.txt --members 4 --diloco 50 --wire int8 --streaming 5 --overlap 9 --mbps 20 --latency 20 --steps 600 --eval-every 50 > $OUT/r/fidelity-4-o9.json 2> $OUT/r/fidelity-4-o9.log
cd $OUT && tar czf r.tgz r && rm -rf r
