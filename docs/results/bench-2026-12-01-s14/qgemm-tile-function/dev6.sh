set -u
mkdir -p $OUT/r
T0=$(date +%s)
for k in old new; do
  b=bench.mjs; [ $k = new ] && b=bench-new.mjs
  node $b qgemm --sizes 4096 --model none --no-tensor-cores --json $OUT/r/qgemm-$k.json > $OUT/r/qgemm-$k.txt 2>&1
  echo "$k done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
done
node bench.mjs qgemm --sizes 4096 --model none --no-tensor-cores --json $OUT/r/qgemm-old2.json > $OUT/r/qgemm-old2.txt 2>&1
echo "old2 done at $(( $(date +%s) - T0 )) s" >> $OUT/r/times.txt
cd $OUT && tar czf r.tgz r && rm -rf r
