mkdir -p $OUT/s11c
date -u > $OUT/s11c/date.txt
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
run() { # name env shape choices
  rm -rf /tmp/nvc; mkdir -p /tmp/nvc
  env $2 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvc timeout 100 node gemm_dispatches.mjs --shape $3 --choices $4 --reps 10 > $OUT/s11c/$1.log 2>&1; echo "$1 rc=$? $(grep 'ms,' $OUT/s11c/$1.log | tr '\n' ' ')"
  mkdir -p $OUT/s11c/cache_$1; cp -r /tmp/nvc/. $OUT/s11c/cache_$1/
}
for i in 1 2 3; do
  run base4096_$i MATMUL_LEAN=0 4096x4096x4096 128x128k8_8x16
  run lean4096_$i MATMUL_LEAN=1 4096x4096x4096 128x128k8_8x16
done
for L in 0 1; do
  run nn88_$L MATMUL_LEAN=$L 4096x4096x4096 128x128k8_8x8,256x128k8_8x8,128x256k8_8x16
  run up_$L MATMUL_LEAN=$L 8192x2560x768 128x128k8_8x16
  run down_$L MATMUL_LEAN=$L 8192x768x2560 128x128k8_8x16,128x128k8_8x16_st264
  run nt_$L MATMUL_LEAN=$L 8192x2560x768:NT 128x256k8_8x16,64x64k16_8x8
  run tn_$L MATMUL_LEAN=$L 768x768x8192:TN 256x128k8_8x8_sk7,256x128k8_8x8
  run acc_$L MATMUL_LEAN=$L 8192x768x768:NT 64x64k16_8x8,128x128k8_8x16
done
cd $OUT && tar czf s11c.tgz s11c && rm -rf s11c
