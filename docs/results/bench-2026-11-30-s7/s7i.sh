mkdir -p $OUT/s7i
for v in step_profile7 step_profile_na; do
timeout 100 node $v.mjs --model base --scheme fp32 --json $OUT/s7i/$v.json > $OUT/s7i/$v.log 2>&1; echo $v rc=$?
grep "class gemm\|k.dx\|v.dx\|o_proj\|q.dx \|down_proj \|up.dx" $OUT/s7i/$v.log
done
cd $OUT && tar czf s7i.tgz s7i && rm -rf s7i
