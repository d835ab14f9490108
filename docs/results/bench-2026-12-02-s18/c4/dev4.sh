set -u
xz -dkf *.mjs.xz
mkdir -p $OUT/r
timeout 200 node attn-i8-tune.mjs --shape 16x512x12x64 --ff 2560 --reps 10 --json $OUT/r/attn-i8-tune.json > $OUT/r/attn-i8-tune.txt 2>&1
timeout 100 node attn-i8-tune.mjs --shape 64x256x6x64 --ff 1024 --reps 10 --json $OUT/r/attn-i8-tune-small.json > $OUT/r/attn-i8-tune-small.txt 2>&1
cd $OUT && tar czf r.tgz r && rm -rf r
