mkdir -p $OUT/sass1
cd_dev=$(pwd)
python3 -c "import triton, os; print(os.path.dirname(triton.__file__))" > $OUT/sass1/triton.txt 2>&1
T=$(cat $OUT/sass1/triton.txt)
ls -la $T/backends/nvidia/bin/ >> $OUT/sass1/triton.txt 2>&1
which cuobjdump nvdisasm >> $OUT/sass1/triton.txt 2>&1
export __GL_SHADER_DISK_CACHE=1 __GL_SHADER_DISK_CACHE_PATH=/tmp/nvcache __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1
rm -rf /tmp/nvcache; mkdir -p /tmp/nvcache
timeout 120 node gemm_ceiling.mjs --rounds 1 --modes fma,lds:eng --probes engine:eng > $OUT/sass1/ceiling.log 2>&1; echo ceiling rc=$?
find /tmp/nvcache ~/.cache/nvidia ~/.nv -type f 2>/dev/null | head -50 > $OUT/sass1/cache_files.txt
du -sh /tmp/nvcache ~/.cache/nvidia ~/.nv 2>/dev/null >> $OUT/sass1/cache_files.txt
cat > /tmp/elf.py <<'PY'
import os, sys, struct
out = sys.argv[1]; n = 0
for root in sys.argv[2:]:
    for dp, _, fs in os.walk(root):
        for f in fs:
            b = open(os.path.join(dp, f), 'rb').read()
            i = b.find(b'\x7fELF')
            while i >= 0:
                try:
                    shoff, = struct.unpack_from('<Q', b, i + 0x28)
                    shentsize, shnum = struct.unpack_from('<HH', b, i + 0x3A)
                    size = shoff + shentsize * shnum
                    if 0 < size < 50_000_000:
                        open(f'{out}/k{n}.cubin', 'wb').write(b[i:i + size]); n += 1
                except Exception as e:
                    print('skip', e)
                i = b.find(b'\x7fELF', i + 4)
print('extracted', n)
PY
mkdir -p $OUT/sass1/elf
python3 /tmp/elf.py $OUT/sass1/elf /tmp/nvcache ~/.cache/nvidia ~/.nv > $OUT/sass1/extract.txt 2>&1
ls -la $OUT/sass1/elf | head >> $OUT/sass1/extract.txt
B=$T/backends/nvidia/bin
for f in $OUT/sass1/elf/*.cubin; do echo "== $f"; $B/cuobjdump --dump-resource-usage $f 2>&1 | head -20; done > $OUT/sass1/resource.txt 2>&1
for f in $(ls $OUT/sass1/elf/*.cubin | head -8); do echo "== $f"; $B/nvdisasm -c $f 2>&1 | head -3000; done > $OUT/sass1/sass.txt 2>&1
cat $OUT/sass1/triton.txt $OUT/sass1/cache_files.txt $OUT/sass1/extract.txt; head -60 $OUT/sass1/resource.txt; wc -l $OUT/sass1/sass.txt
cd $OUT && tar czf sass1.tgz sass1 && rm -rf sass1
