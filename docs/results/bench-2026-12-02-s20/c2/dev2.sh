set -u
xz -dkf attn-tune.mjs.xz
mkdir -p $OUT/r
timeout 200 node attn-tune.mjs --shapes 16x512x12x64 --passes ds --ff 2560 --reps 10 --json $OUT/r/attn-ds.json > $OUT/r/attn-ds.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
