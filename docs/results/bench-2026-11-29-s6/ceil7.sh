mkdir -p $OUT/ceil7
timeout 300 node gemm_ceiling.mjs --rounds 3 --modes none --probes engine:eng,engine:eng:zero,engine:eng:div,engine:eng:epi,engine:eng:vars,engine:eng:nt,engine:eng:zero+div+epi+vars+nt > $OUT/ceil7/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil7/ceiling.log
cd $OUT && tar czf ceil7.tgz ceil7 && rm -rf ceil7
