mkdir -p $OUT/s10h
date -u > $OUT/s10h/date.txt
cat rev.txt > $OUT/s10h/rev.txt
V=128x128k8_8x16,256x128k8_8x8,128x256k8_8x16,64x64k16_8x8,128x128k8_8x8,128x128k16_8x8_np,128x128k8_8x16_np,32x32k16_4x4
timeout 280 node gemm_tune23.mjs --variants $V --models base --stream-k 264,528 --budget-s 230 --json $OUT/s10h/gemm_tune.json > $OUT/s10h/gemm_tune.log 2>&1; echo tune rc=$?
grep -v "^\s*$" $OUT/s10h/gemm_tune.log | tail -40 | cut -c1-200
cd $OUT && tar czf s10h.tgz s10h && rm -rf s10h
