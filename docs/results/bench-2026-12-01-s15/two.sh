# Two headless peers (separate processes, real WebRTC over loopback) training data-parallel on this
# machine's one GPU, through the embedded PeerServer. Usage: bash two.sh OUTDIR MODEL STEPS MODE [extra peer args]
set -u
pkill -f "peer.mjs" ; pkill -f "serve.mjs"; sleep 0.5
o=$1; model=$2; steps=$3; mode=$4; shift 4
mkdir -p $o/dist; echo '<html></html>' > $o/dist/index.html
node serve.mjs --port 5190 --host 127.0.0.1 --dir $o/dist > $o/serve.log 2>&1 &
S=$!
sleep 2
common="--train --min-members 2 --model $model --steps $steps --mode $mode --checkpoint-every 0 --quorum-timeout 120 $*"
node peer.mjs --host --page http://127.0.0.1:5190/ $common --out $o/a > $o/a.log 2>&1 &
A=$!
for i in $(seq 1 60); do grep -q "link: " $o/a.log && break; sleep 1; done
link=$(grep -o "link: [^ ]*" $o/a.log | head -1 | cut -d' ' -f2)
node peer.mjs --join "$link" $common --out $o/b > $o/b.log 2>&1 &
B=$!
wait $A; wait $B
kill $S
