import { describe, expect, it } from 'vitest';
import { ropeRef, ropeTable, ropeTablePacked } from '../../src/engine/kernels/rope/rope.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('rope table', () => {
  it('matches hand-computed angles pos · theta^(-2i/D)', () => {
    // D = 4, theta = 100: inv_freq = [1, 0.1]; position 5.
    const a = ropeTable(6, 4, 100);
    expect(a.cos.length).toBe(12);
    expect(Math.abs(a.cos[5 * 2 + 0] - Math.cos(5))).toBeLessThan(1e-7);            // 0.28366218546322625
    expect(Math.abs(a.sin[5 * 2 + 0] - -0.9589242746631385)).toBeLessThan(1e-7);
    expect(Math.abs(a.cos[5 * 2 + 1] - 0.8775825618903728)).toBeLessThan(1e-7);     // cos(0.5)
    expect(Math.abs(a.sin[5 * 2 + 1] - 0.479425538604203)).toBeLessThan(1e-7);      // sin(0.5)
    expect(a.cos[0]).toBe(1);
    expect(a.sin[1]).toBe(0);
    // D = 64, theta = 1e4: inv_freq[1] = 1e4^(-1/32) = 0.7498942093324559; position 3.
    const b = ropeTable(4, 64, 10000);
    expect(Math.abs(b.cos[3 * 32 + 1] - -0.6279266524418038)).toBeLessThan(1e-6);
    expect(Math.abs(b.sin[3 * 32 + 1] - 0.7782725224195122)).toBeLessThan(1e-6);
  });

  it('rounds every step to fp32 like torch (angle = fround(pos · fround(inv_freq)))', () => {
    const { cos } = ropeTable(1000, 8, 10000);
    const inv = Math.fround(1 / Math.fround(Math.pow(10000, Math.fround(2 / 8))));
    expect(cos[999 * 4 + 1]).toBe(Math.fround(Math.cos(Math.fround(999 * inv))));
  });

  it('packs cos then sin', () => {
    const p = ropeTablePacked(3, 6, 500);
    const { cos, sin } = ropeTable(3, 6, 500);
    expect(Array.from(p)).toEqual([...cos, ...sin]);
  });
});

describe('rope reference', () => {
  const [B, T, H, D, theta] = [2, 5, 3, 8, 10000];
  const n = B * T * H * D;

  it('equals HF x·cos + rotate_half(x)·sin with emb = cat(freqs, freqs)', () => {
    const x = new Rng(1).normalArray(n);
    const y = ropeRef(x, B, T, H, D, theta);
    const { cos, sin } = ropeTable(T, D, theta);
    const P = D / 2;
    for (let row = 0; row < B * T * H; row++) {
      const t = Math.floor(row / H) % T;
      const xs = Array.from(x.subarray(row * D, row * D + D));
      const rot = [...xs.slice(P).map((v) => -v), ...xs.slice(0, P)];
      for (let d = 0; d < D; d++) {
        const want = xs[d] * cos[t * P + (d % P)] + rot[d] * sin[t * P + (d % P)];
        expect(y[row * D + d]).toBeCloseTo(want, 12);
      }
    }
  });

  it('leaves position 0 unchanged and inverse undoes forward', () => {
    const x = new Rng(2).normalArray(n);
    const y = ropeRef(x, B, T, H, D, theta);
    expectClose(y.slice(0, H * D), x.slice(0, H * D), { atol: 0, rtol: 0, label: 't = 0' });
    expectClose(ropeRef(y, B, T, H, D, theta, true), x, { atol: 1e-6, rtol: 0, label: 'inverse∘forward' });
  });

  it('backward (inverse rotation of dy) matches central finite differences of sum(w ∘ y)', () => {
    const rng = new Rng(3);
    const x = Float64Array.from(rng.normalArray(n));
    const w = Float64Array.from(rng.normalArray(n));
    const grad = ropeRef(w, B, T, H, D, theta, true);
    const loss = () => ropeRef(x, B, T, H, D, theta).reduce((s, v, i) => s + v * w[i], 0);
    const eps = 1e-4;
    const fd = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const x0 = x[i];
      x[i] = x0 + eps;
      const lp = loss();
      x[i] = x0 - eps;
      const lm = loss();
      x[i] = x0;
      fd[i] = (lp - lm) / (2 * eps);
    }
    expectClose(grad, fd, { atol: 1e-8, rtol: 1e-8, label: 'dx' });
  });
});
