# Extract every zstd frame of an NVIDIA GL/Vulkan shader disk cache .bin into files (decompressed with the zstd CLI).
import glob, subprocess, sys, os
for f in sys.argv[1:]:
    d = open(f, 'rb').read()
    starts = []
    i = 0
    while True:
        j = d.find(b'\x28\xb5\x2f\xfd', i)
        if j < 0: break
        starts.append(j); i = j + 1
    for n, s in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(d)
        p = subprocess.run(['zstd', '-d', '-c', '-q'], input=d[s:end], capture_output=True)
        out = f + f'.frame{n}'
        open(out, 'wb').write(p.stdout)
        print(out, len(p.stdout), p.stdout[:16], p.returncode, p.stderr[:80])
