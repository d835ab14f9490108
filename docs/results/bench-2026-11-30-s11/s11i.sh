mkdir -p $OUT/s11i
date -u > $OUT/s11i/date.txt
cat rev.txt > $OUT/s11i/rev.txt
timeout 60 node gemm_dispatches.mjs --shape 8192x65x768:NT --choices 64x64k16_8x8,128x128k8_8x8,256x128k8_8x8_sk4,64x64k16_8x8_ia --reps 10 > $OUT/s11i/d65.log 2>&1; echo "d65 rc=$?"; grep "ms," $OUT/s11i/d65.log | cut -c1-150
timeout 60 node bench28.mjs gemm --shapes 8192x65x768:NT --model none --variants 64x64k16_8x8,128x128k8_8x8,256x128k8_8x8_sk4,64x64k16_8x8_ia --json $OUT/s11i/b65.json > $OUT/s11i/b65.log 2>&1; echo "b65 rc=$?"; grep "8192x65" $OUT/s11i/b65.log | cut -c1-150
timeout 60 node bench28.mjs gemm --shapes 8192x65x768:NT --model none --variants 64x64k16_8x8,128x128k8_8x8,256x128k8_8x8_sk4,64x64k16_8x8_ia --warmup 2 --reps 9 --json $OUT/s11i/b65b.json > $OUT/s11i/b65b.log 2>&1; echo "b65b rc=$?"; grep "8192x65" $OUT/s11i/b65b.log | cut -c1-150
cd $OUT && tar czf s11i.tgz s11i && rm -rf s11i
