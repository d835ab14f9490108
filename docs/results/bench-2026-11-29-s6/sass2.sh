mkdir -p $OUT/sass2
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
rm -rf /tmp/nvcache; mkdir -p /tmp/nvcache
timeout 120 node gemm_ceiling.mjs --rounds 1 --modes none --probes engine:eng > $OUT/sass2/ceiling.log 2>&1; echo ceiling rc=$?
find /tmp/nvcache -type f -exec ls -la {} \; > $OUT/sass2/files.txt
cp -r /tmp/nvcache $OUT/sass2/
ls /usr/local/cuda/bin | head -50 > $OUT/sass2/cuda_bin.txt
nvidia-smi -q | grep -i "driver\|cuda" | head > $OUT/sass2/drv.txt
cat $OUT/sass2/files.txt
cd $OUT && tar czf sass2.tgz sass2 && rm -rf sass2
