mkdir -p $OUT/ceil4
timeout 400 node gemm_ceiling.mjs --rounds 3 --probes engine:eng --engine-orders eng,rq,qr --modes fma:rq,lds:eng,lds_w64:eng,lds_w64:rq > $OUT/ceil4/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil4/ceiling.log
cd $OUT && tar czf ceil4.tgz ceil4 && rm -rf ceil4
