mkdir -p $OUT/ceil8
timeout 300 node gemm_ceiling.mjs --rounds 3 --modes none --probes engine:eng,engine:eng:fn,engine:eng:fn+zero+div+epi+vars+nt,shifted:eng:fn > $OUT/ceil8/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil8/ceiling.log
cd $OUT && tar czf ceil8.tgz ceil8 && rm -rf ceil8
