mkdir -p $OUT/ceil2
timeout 400 node gemm_ceiling.mjs --rounds 3 --occupancy > $OUT/ceil2/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil2/ceiling.log
cd $OUT && tar czf ceil2.tgz ceil2 && rm -rf ceil2
