mkdir -p $OUT/s11b
cat > /tmp/dis.py <<'PY'
import subprocess, sys, re, os
f, out = sys.argv[1], sys.argv[2]
d = open(f, 'rb').read()
for attempt in range(8):
    open('/tmp/cut.bin', 'wb').write(d)
    p = subprocess.run(['/usr/local/cuda/bin/nvdisasm', '--binary', 'SM90', '/tmp/cut.bin'], capture_output=True, text=True)
    m = re.search(r'at address (0x[0-9a-f]+)', p.stderr)
    if p.returncode == 0 or not m:
        open(out, 'w').write(p.stdout + p.stderr); print(f, 'ok', len(d)); break
    a = int(m.group(1), 16)
    if a == 0: open(out, 'w').write(p.stderr); print(f, 'bad start'); break
    d = d[:a]
PY
for f in sass/*.bin; do n=$(basename $f .bin); python3 /tmp/dis.py $f $OUT/s11b/$n.sass; done
cd $OUT && tar czf s11b.tgz s11b && rm -rf s11b
