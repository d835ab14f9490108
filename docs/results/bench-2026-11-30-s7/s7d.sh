mkdir -p $OUT/s7d
for i in 1 2; do for v in A B C; do
timeout 100 node gc_$v.mjs --rounds 2 --modes none --probes none --variants 128x128k8_8x8,128x128k8_8x8_sw8,256x128k8_8x8,128x128k16_8x8 > $OUT/s7d/gc_$v$i.log 2>&1; echo $v$i rc=$?
grep "TFLOP" $OUT/s7d/gc_$v$i.log | cut -c1-50
done; done
grep -h "differ" $OUT/s7d/gc_*1.log
cd $OUT && tar czf s7d.tgz s7d && rm -rf s7d
