# Issue 18's speed check: the base training step (B16 x T512) fp32 and AGoQ, the code before the
# refactor (bench-before.mjs, 69e63eb) and after it (bench-after.mjs, main), alternated twice in
# one call (PyTorch's step beside them: s12b).
mkdir -p $OUT/s12a
date -u > $OUT/s12a/date.txt
cat rev.txt > $OUT/s12a/rev.txt
for i in 1 2; do
  for v in before after; do
    timeout 115 node bench-$v.mjs step --model base --scheme fp32,agoq --reps 20 --json $OUT/s12a/${v}_$i.json > $OUT/s12a/${v}_$i.log 2>&1; echo "$v $i rc=$?"
    grep -E "^step +base" $OUT/s12a/${v}_$i.log | grep wallclock | cut -c1-100
  done
done
cd $OUT && tar czf s12a.tgz s12a && rm -rf s12a
