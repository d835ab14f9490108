mkdir -p $OUT/ceil3
timeout 400 node gemm_ceiling.mjs --rounds 3 --modes fma:rq,fma:qr,fma:eng,lds:rq,lds:qr,lds:eng,lds_sts_bar:eng > $OUT/ceil3/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/ceil3/ceiling.log
cd $OUT && tar czf ceil3.tgz ceil3 && rm -rf ceil3
