mkdir -p $OUT/ceil9
timeout 300 node gemm_ceiling.mjs --rounds 3 --modes none --probes engine:eng,engine:eng:decl,engine:eng:decl+fn+zero+div+epi+vars+nt,engine:rq:decl > $OUT/ceil9/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil9/ceiling.log
cd $OUT && tar czf ceil9.tgz ceil9 && rm -rf ceil9
