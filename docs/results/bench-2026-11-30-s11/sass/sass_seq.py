import sys
exec(open('/tmp/sass_hist.py').read().split('def ops')[0])
d = open(sys.argv[1],'rb').read()
lo, hi = int(sys.argv[2]), int(sys.argv[3])
o = [((d[p] | (d[p+1] << 8)) & 0xfff) for p in range(8, len(d) - 16, 16)]
out=[]; run=0
for i in range(lo, hi):
    n = NAMES.get(o[i] & 0x1ff, hex(o[i]))
    if n == 'FFMA': run += 1; continue
    if run: out.append(f'F{run}'); run = 0
    out.append(n)
if run: out.append(f'F{run}')
print(' '.join(out))
