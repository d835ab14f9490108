set -u
xz -dkf attn-i8-tune.mjs.xz
mkdir -p $OUT/r
for ff in 2560 5120 1280; do
timeout 60 node attn-i8-tune.mjs --shape 16x512x12x64 --ff $ff --reps 20 --kernels dkdvDp8 --default-only --json $OUT/r/i8-ff$ff.json > $OUT/r/i8-ff$ff.txt 2>&1
done
cd $OUT && tar czf r.tgz r && rm -rf r
