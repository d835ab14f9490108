#!/usr/bin/env python3
"""Loss curves from `npm run train` logs: a CSV of validation losses and an SVG plot (no plotting
library needed). Each log is named <scheme>.log; lines 'step N: loss X ...' and 'step N: val_loss X'.
A file '*.val.txt' may add validation points as '<scheme> step N: val_loss X ...' lines.

  python3 tools/curves.py DIR [--out DIR/curves] [--ymax 2.6]
"""
import argparse, glob, math, os, re

STEP = re.compile(r'step (\d+): loss ([0-9.eE+-]+|nan)')
VAL = re.compile(r'step (\d+): val_loss ([0-9.eE+-]+)')
COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f',
          '#bcbd22', '#17becf', '#000000', '#aec7e8', '#ff9896', '#98df8a']


def read(dirname):
    runs = {}
    for path in sorted(glob.glob(os.path.join(dirname, '*.log'))):
        name = os.path.basename(path)[:-4]
        text = open(path).read()
        runs[name] = {
            'train': [(int(s), float(v)) for s, v in STEP.findall(text)],
            'val': [(int(s), float(v)) for s, v in VAL.findall(text)],
            'diverged': 'diverged' in text,
        }
    for path in glob.glob(os.path.join(dirname, '*.val.txt')):
        for line in open(path):
            if line.startswith('#') or not line.strip():
                continue
            name = line.split()[0]
            runs.setdefault(name, {'train': [], 'val': [], 'diverged': False})
            runs[name]['val'] = [(int(s), float(v)) for s, v in VAL.findall(line)]
    return runs


def svg(runs, key, title, ymax, out):
    W, H, L, R, T, B = 760, 420, 60, 150, 30, 40
    pts = [p for r in runs.values() for p in r[key] if math.isfinite(p[1])]
    if not pts:
        return
    x1 = max(p[0] for p in pts)
    y0 = min(p[1] for p in pts)
    y1 = min(ymax, max(p[1] for p in pts))
    sx = lambda x: L + (W - L - R) * x / max(x1, 1)
    sy = lambda y: T + (H - T - B) * (1 - (min(y, y1) - y0) / max(y1 - y0, 1e-9))
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/><text x="{L}" y="18" font-size="13">{title}</text>']
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        o.append(f'<line x1="{L}" x2="{W - R}" y1="{sy(y):.1f}" y2="{sy(y):.1f}" stroke="#eee"/>'
                 f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    for i in range(7):
        x = x1 * i / 6
        o.append(f'<text x="{sx(x):.1f}" y="{H - B + 16}" text-anchor="middle">{int(x)}</text>')
    o.append(f'<text x="{(L + W - R) / 2}" y="{H - 6}" text-anchor="middle">step</text>')
    for k, (name, r) in enumerate(sorted(runs.items())):
        p = [q for q in r[key] if math.isfinite(q[1])]
        if not p:
            continue
        c = COLORS[k % len(COLORS)]
        o.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="' +
                 ' '.join(f'{sx(x):.1f},{sy(y):.1f}' for x, y in p) + '"/>')
        label = name + (' (diverged)' if r['diverged'] else '') + (f' {p[-1][1]:.4f}' if key == 'val' else '')
        o.append(f'<text x="{W - R + 8}" y="{T + 14 * k + 10}" fill="{c}">{label}</text>')
    o.append('</svg>')
    open(out, 'w').write('\n'.join(o))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('dir')
    ap.add_argument('--out')
    ap.add_argument('--ymax', type=float, default=2.6)
    a = ap.parse_args()
    out = a.out or os.path.join(a.dir, 'curves')
    runs = read(a.dir)
    steps = sorted({s for r in runs.values() for s, _ in r['val']})
    with open(out + '.csv', 'w') as f:
        f.write('scheme,' + ','.join(str(s) for s in steps) + ',diverged\n')
        for name, r in sorted(runs.items()):
            v = dict(r['val'])
            f.write(name + ',' + ','.join(f'{v[s]:.4f}' if s in v else '' for s in steps) + f",{int(r['diverged'])}\n")
    svg(runs, 'val', 'validation loss (small, batch 32, context 256)', a.ymax, out + '.val.svg')
    svg(runs, 'train', 'training loss (small, batch 32, context 256)', a.ymax, out + '.train.svg')
    print(open(out + '.csv').read())


if __name__ == '__main__':
    main()
