mkdir -p $OUT/s7h
timeout 150 node gemm_ceiling7.mjs --rounds 3 --modes none --probes none --variants 128x128k8_8x16_sw8,256x128k8_8x16 --occupancy --wmax 4 > $OUT/s7h/ceiling.log 2>&1; echo rc=$?
grep "TFLOP\|differ\|occupancy" $OUT/s7h/ceiling.log | cut -c1-160
cd $OUT && tar czf s7h.tgz s7h && rm -rf s7h
