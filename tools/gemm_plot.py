#!/usr/bin/env python3
"""GEMM throughput against size, ours and the baseline from the same run: an SVG from the merged
JSON that `npm run bench -- report --input ours.json --baseline torch.json --json merged.json`
writes (square NN problems only).

  python3 tools/gemm_plot.py merged_gemm.json out.svg
"""
import json, sys

rows = [r for r in json.load(open(sys.argv[1]))['rows']
        if r['suite'] == 'gemm' and r['detail'].get('best') and r['detail']['M'] == r['detail']['N'] == r['detail']['K']
        and not r['detail']['transA'] and not r['detail']['transB']]
rows.sort(key=lambda r: r['detail']['M'])
sizes = [r['detail']['M'] for r in rows]
ours = [r['value'] / 1000 for r in rows]
base = [(r.get('baseline') or {}).get('value', 0) / 1000 for r in rows]
W, H, L, R, T, B = 640, 360, 60, 170, 30, 40
ymax = max(ours + base) * 1.1
sx = lambda i: L + (W - L - R) * i / max(len(sizes) - 1, 1)
sy = lambda y: T + (H - T - B) * (1 - y / ymax)
o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
     f'<rect width="{W}" height="{H}" fill="white"/><text x="{L}" y="18" font-size="13">fp32 GEMM n×n×n, TFLOP/s (higher is better)</text>']
for k in range(6):
    y = ymax * k / 5
    o.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/><text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
for i, n in enumerate(sizes):
    o.append(f'<text x="{sx(i):.1f}" y="{H - B + 16}" text-anchor="middle">{n}</text>')
o.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">n</text>')
for name, ys, c in (('ours (WGSL, Dawn/Vulkan)', ours, '#d62728'), ('cuBLAS SGEMM, TF32 off', base, '#1f77b4')):
    o.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="' + ' '.join(f'{sx(i):.1f},{sy(y):.1f}' for i, y in enumerate(ys)) + '"/>')
    o += [f'<circle cx="{sx(i):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"/>' for i, y in enumerate(ys)]
o.append(f'<text x="{W - R + 8}" y="{T + 20}" fill="#d62728">ours (WGSL)</text><text x="{W - R + 8}" y="{T + 36}" fill="#1f77b4">cuBLAS SGEMM</text>')
o.append('</svg>')
open(sys.argv[2], 'w').write('\n'.join(o))
print(' '.join(f'{n}: {a:.1f}/{b:.1f}' for n, a, b in zip(sizes, ours, base)))
