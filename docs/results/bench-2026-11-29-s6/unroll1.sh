mkdir -p $OUT/unroll1
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
rm -rf /tmp/nvcache; mkdir -p /tmp/nvcache
timeout 300 node gemm_ceiling.mjs --rounds 3 --modes fma:rq,lds:eng,lds_unroll:eng,lds_unroll:rq --probes none --engine-orders eng,unroll > $OUT/unroll1/ceiling.log 2>&1; echo ceiling rc=$?
cat $OUT/unroll1/ceiling.log
cp -r /tmp/nvcache $OUT/unroll1/
which zstd > $OUT/unroll1/tools.txt 2>&1
cd $OUT && tar czf unroll1.tgz unroll1 && rm -rf unroll1
