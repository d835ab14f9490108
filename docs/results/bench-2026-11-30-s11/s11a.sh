mkdir -p $OUT/s11a
date -u > $OUT/s11a/date.txt
cat rev.txt > $OUT/s11a/rev.txt
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
for c in 128x128k8_8x16 128x128k8_8x16_st264 128x128k8_8x16_sk2 128x128k8_8x16_st2048 128x256k8_8x16; do
  rm -rf /tmp/nvc_$c; mkdir -p /tmp/nvc_$c
  __GL_SHADER_DISK_CACHE_PATH=/tmp/nvc_$c timeout 100 node gemm_dispatches.mjs --shape 4096x4096x4096 --choices $c --reps 10 > $OUT/s11a/d_$c.log 2>&1; echo $c rc=$?
  grep "ms," $OUT/s11a/d_$c.log
  mkdir -p $OUT/s11a/cache_$c; cp -r /tmp/nvc_$c/. $OUT/s11a/cache_$c/
  find /tmp/nvc_$c -type f -exec ls -la {} \; > $OUT/s11a/files_$c.txt
done
python3 -c "import zstandard" 2>&1 | tail -1 > $OUT/s11a/py_zstd.txt
ls /usr/local/cuda/bin 2>&1 | head -40 > $OUT/s11a/cuda_bin.txt
which nvdisasm cuobjdump >> $OUT/s11a/cuda_bin.txt 2>&1
cd $OUT && tar czf s11a.tgz s11a && rm -rf s11a
