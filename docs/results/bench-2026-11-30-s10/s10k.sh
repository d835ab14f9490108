mkdir -p $OUT/s10k
date -u > $OUT/s10k/date.txt
echo "a6371ae + probe (MM_FIXED, NOROB env switches; not committed)" > $OUT/s10k/rev.txt
S="--shape 4096x4096x4096 --choices 128x128k8_8x16 --reps 30"
for i in 1 2; do
for m in plain decl inline norob; do
case $m in
plain) timeout 60 node gd_probe.mjs $S > $OUT/s10k/${m}_$i.log 2>&1;;
decl) MM_FIXED=decl MM_FIXED_SIZES=4096,4096,4096 timeout 60 node gd_probe.mjs $S > $OUT/s10k/${m}_$i.log 2>&1;;
inline) MM_FIXED=inline MM_FIXED_SIZES=4096,4096,4096 timeout 60 node gd_probe.mjs $S > $OUT/s10k/${m}_$i.log 2>&1;;
norob) NOROB=1 timeout 60 node gd_probe.mjs $S > $OUT/s10k/${m}_$i.log 2>&1;;
esac
echo "$m $i: $(grep 'ms,' $OUT/s10k/${m}_$i.log | cut -c1-80)"
done
done
cd $OUT && tar czf s10k.tgz s10k && rm -rf s10k
