mkdir -p $OUT/ceil5
timeout 500 node gemm_ceiling.mjs --rounds 3 --probes none --modes fma:rq,lds:eng --variants 128x64k8_8x16,64x128k8_8x16 --occupancy --wmax 7 > $OUT/ceil5/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil5/ceiling.log
cd $OUT && tar czf ceil5.tgz ceil5 && rm -rf ceil5
