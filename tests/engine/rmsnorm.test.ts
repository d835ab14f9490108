import { describe, expect, it } from 'vitest';
import { rmsnormBackwardRef, rmsnormForwardRef } from '../../src/engine/kernels/rmsnorm/rmsnorm.ref';
import { rmsnormChunking } from '../../src/engine/kernels/rmsnorm/rmsnorm';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

// Scalar objective L = Σ y ⊙ R, so dL/dy = R and the reference backward must match ∂L/∂x, ∂L/∂w.
function objective(x: ArrayLike<number>, w: ArrayLike<number>, R: ArrayLike<number>, N: number, C: number, eps: number): number {
  const { y } = rmsnormForwardRef(x, w, N, C, eps);
  let s = 0;
  for (let i = 0; i < y.length; i++) s += y[i] * R[i];
  return s;
}

describe('rmsnorm reference', () => {
  it('matches the definition y = w * x / sqrt(mean(x^2) + eps)', () => {
    const x = [1, 2, 3, -4];
    const w = [1, 0.5, 2, 1];
    const { y, rstd } = rmsnormForwardRef(x, w, 1, 4, 1e-5);
    const r = 1 / Math.sqrt((1 + 4 + 9 + 16) / 4 + 1e-5);
    expect(rstd[0]).toBeCloseTo(r, 14);
    expectClose(y, [r, 2 * r * 0.5, 3 * r * 2, -4 * r], { atol: 1e-14, rtol: 0 });
  });

  for (const [N, C] of [[1, 1], [3, 5], [2, 7]]) {
    it(`backward matches central finite differences (N=${N}, C=${C})`, () => {
      const rng = new Rng(N * 100 + C);
      const eps = 1e-3;
      const x = Float64Array.from(rng.normalArray(N * C));
      const w = Float64Array.from(rng.normalArray(C));
      const R = Float64Array.from(rng.normalArray(N * C));
      const { dx, dw } = rmsnormBackwardRef(x, w, R, N, C, eps);
      const h = 1e-6;
      const fd = (arr: Float64Array, i: number): number => {
        const o = arr[i];
        arr[i] = o + h;
        const up = objective(x, w, R, N, C, eps);
        arr[i] = o - h;
        const dn = objective(x, w, R, N, C, eps);
        arr[i] = o;
        return (up - dn) / (2 * h);
      };
      expectClose(dx, Array.from(x, (_, i) => fd(x, i)), { atol: 1e-7, rtol: 1e-6, label: 'dx' });
      expectClose(dw, Array.from(w, (_, i) => fd(w, i)), { atol: 1e-7, rtol: 1e-6, label: 'dw' });
    });
  }

  it('accumulates into dx and dw when given', () => {
    const rng = new Rng(5);
    const x = rng.normalArray(6);
    const w = rng.normalArray(3);
    const dy = rng.normalArray(6);
    const base = rmsnormBackwardRef(x, w, dy, 2, 3, 1e-5);
    const acc = rmsnormBackwardRef(x, w, dy, 2, 3, 1e-5, [1, 1, 1, 1, 1, 1], [2, 2, 2]);
    expectClose(acc.dx, Array.from(base.dx, (v) => v + 1), { atol: 1e-12 });
    expectClose(acc.dw, Array.from(base.dw, (v) => v + 2), { atol: 1e-12 });
  });

  it('chunks the dw reduction into at most 256 chunks covering every row', () => {
    for (const N of [1, 31, 32, 33, 1000, 8192, 65536, 100003]) {
      const { R, K } = rmsnormChunking(N);
      expect(K).toBeLessThanOrEqual(256);
      expect(R * K).toBeGreaterThanOrEqual(N);
      expect(R * (K - 1)).toBeLessThan(N);
    }
  });
});
