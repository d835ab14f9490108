set -u
xz -dkf attn-tune.mjs.xz
mkdir -p $OUT/r
for ff in 2560 1280 640; do
timeout 150 node attn-tune.mjs --shapes 16x512x12x64 --passes ds --ff $ff --reps 10 --json $OUT/r/attn-ds-ff$ff.json > $OUT/r/attn-ds-ff$ff.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
