# Run as: bash .device/on-device.sh bash -c '<this>' (the same .device/ as c1, machine still warm)
xz -dkf train.mjs.xz; mkdir -p $OUT/r; T0=$(date +%s)
for sc in int8-attn agoq-int8-attn; do
  timeout 540 node train.mjs --model base --batch 16 --seq 512 --steps 2000 --scheme $sc --data tinyshakespeare.txt --out /tmp/runs/$sc --checkpoint-every 0 --eval-every 200 --eval-batches 20 > $OUT/r/train-base-$sc.log 2>&1 &
done; wait; echo "done at $(( $(date +%s) - T0 )) s" > $OUT/r/times.txt
for sc in int8-attn agoq-int8-attn; do cp /tmp/runs/$sc/metrics.jsonl $OUT/r/metrics-base-$sc.jsonl; cp /tmp/runs/$sc/run.json $OUT/r/run-base-$sc.json; done
