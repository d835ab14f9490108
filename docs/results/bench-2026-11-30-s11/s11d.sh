mkdir -p $OUT/s11d
date -u > $OUT/s11d/date.txt
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
run() { # name lean shape choices
  rm -rf /tmp/nvc; mkdir -p /tmp/nvc
  MATMUL_LEAN=$2 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvc timeout 100 node gemm_dispatches.mjs --shape $3 --choices $4 --reps 10 > $OUT/s11d/$1.log 2>&1; echo "$1 rc=$? $(grep 'ms,' $OUT/s11d/$1.log | sed 's/; largest.*//' | tr '\n' ' ')"
  mkdir -p $OUT/s11d/cache_$1; cp -r /tmp/nvc/. $OUT/s11d/cache_$1/
}
for i in 1 2; do
  for L in none z st ld st,z ld,st; do
    run sq_${L//,/}_$i $L 4096x4096x4096 128x128k8_8x16
  done
done
cd $OUT && tar czf s11d.tgz s11d && rm -rf s11d
