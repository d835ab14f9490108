mkdir -p $OUT/s11g
date -u > $OUT/s11g/date.txt
cat rev.txt > $OUT/s11g/rev.txt
for i in 1 2; do
timeout 100 node gemm_dispatches.mjs --shape 4096x4096x4096 --choices 128x128k8_8x16,128x128k8_8x16_ia,128x128k8_8x16_st264,128x128k8_8x16_ia_st264,128x128k8_8x16_ia_st528 --reps 10 > $OUT/s11g/sq_$i.log 2>&1; echo "sq rc=$? $(grep 'ms,' $OUT/s11g/sq_$i.log | sed 's/; largest difference from 128x128k8_8x16/ d/' | tr '\n' ' ')"
done
V=128x128k8_8x16,128x128k8_8x16_ia,256x128k8_8x8,256x128k8_8x8_ia,128x256k8_8x16,128x256k8_8x16_ia,64x64k16_8x8,64x64k16_8x8_ia,128x128k8_8x8,128x128k8_8x8_ia,128x128k16_8x8_np,128x128k8_8x16_np,32x32k16_4x4
timeout 470 node gemm_tune26.mjs --variants $V --models base --stream-k 264 --budget-s 400 --json $OUT/s11g/gemm_tune.json > $OUT/s11g/gemm_tune.log 2>&1; echo tune rc=$?
grep -v "^\s*$" $OUT/s11g/gemm_tune.log | tail -45 | cut -c1-200
cd $OUT && tar czf s11g.tgz s11g && rm -rf s11g
