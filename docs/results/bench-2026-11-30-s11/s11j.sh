mkdir -p $OUT/s11j
date -u > $OUT/s11j/date.txt
cat rev.txt > $OUT/s11j/rev.txt
V=128x128k8_8x16,128x128k8_8x16_ia,256x128k8_8x8,256x128k8_8x8_ia,128x256k8_8x16,128x256k8_8x16_ia,64x64k16_8x8,64x64k16_8x8_ia,128x128k8_8x8,128x128k8_8x8_ia,128x128k16_8x8_np,128x128k8_8x16_np,32x32k16_4x4
timeout 470 node gemm_tune29.mjs --variants $V --models base --stream-k 264 --warmup-ms 50 --budget-s 400 --json $OUT/s11j/gemm_tune.json > $OUT/s11j/gemm_tune.log 2>&1; echo tune rc=$?
grep -v "^\s*$" $OUT/s11j/gemm_tune.log | grep -A22 "^shape " | cut -c1-200
cd $OUT && tar czf s11j.tgz s11j && rm -rf s11j
