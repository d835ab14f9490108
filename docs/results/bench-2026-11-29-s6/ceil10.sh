mkdir -p $OUT/ceil10
timeout 300 node gemm_ceiling.mjs --rounds 3 --modes none --probes engine:eng,engine:eng:ovr,engine:eng:ovr+decl+fn+zero+div+epi+vars+nt > $OUT/ceil10/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil10/ceiling.log
cd $OUT && tar czf ceil10.tgz ceil10 && rm -rf ceil10
