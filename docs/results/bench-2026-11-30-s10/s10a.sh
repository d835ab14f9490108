mkdir -p $OUT/s10a
date -u > $OUT/s10a/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/s10a/gpu.txt 2>&1
V1=128x128k8_8x16,128x128k8_8x16_ar,128x128k16_8x16,128x128k16_8x16_ar
V2=128x128k16_8x16_ar,128x128k16_8x16,128x128k8_8x16_ar,128x128k8_8x16
for i in 1 2; do
timeout 90 node bench16.mjs gemm --sizes 4096 --model none --variants $V1 --json $OUT/s10a/ab${i}a.json > $OUT/s10a/ab${i}a.log 2>&1; echo ab${i}a rc=$?
timeout 60 python3 torch_baseline.py --from $OUT/s10a/ab${i}a.json --json $OUT/s10a/torch_ab${i}.json > $OUT/s10a/torch_ab${i}.log 2>&1; echo torch $i rc=$?
timeout 90 node bench16.mjs gemm --sizes 4096 --model none --variants $V2 --json $OUT/s10a/ab${i}b.json > $OUT/s10a/ab${i}b.log 2>&1; echo ab${i}b rc=$?
for x in a b; do node bench16.mjs report --input $OUT/s10a/ab${i}${x}.json --baseline $OUT/s10a/torch_ab${i}.json --json $OUT/s10a/merged_ab${i}${x}.json > $OUT/s10a/table_ab${i}${x}.txt 2>&1; cut -c1-170 $OUT/s10a/table_ab${i}${x}.txt | grep -i "4096\|variant"; done
done
timeout 120 node bench16.mjs gemm --shapes 3968x4096x4096,4096x4096x4096,4224x4096x4096,4352x4096x4096,4096x4224x4096 --model none --variants 128x128k8_8x16 --json $OUT/s10a/wave.json > $OUT/s10a/wave.log 2>&1; echo wave rc=$?
grep -v "^\s*$" $OUT/s10a/wave.log | tail -12 | cut -c1-170
timeout 150 node bench16.mjs gemm --sizes 8192 --model base --variants 128x128k8_8x16,128x128k8_8x16_ar --json $OUT/s10a/model.json > $OUT/s10a/model.log 2>&1; echo model rc=$?
grep -v "^\s*$" $OUT/s10a/model.log | tail -30 | cut -c1-170
cd $OUT && tar czf s10a.tgz s10a && rm -rf s10a
