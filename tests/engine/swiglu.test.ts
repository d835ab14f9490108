import { describe, expect, it } from 'vitest';
import { sigmoidRef, swigluBackwardRef, swigluForwardRef } from '../../src/engine/kernels/swiglu/swiglu.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('swiglu reference', () => {
  it('computes silu(g) * u and a stable sigmoid', () => {
    expectClose(swigluForwardRef([0, 1, -2], [3, 2, 1]), [0, 2 / (1 + Math.exp(-1)), -2 / (1 + Math.exp(2))], { atol: 1e-15 });
    expect(sigmoidRef(-1000)).toBe(0);
    expect(sigmoidRef(1000)).toBe(1);
    expect(sigmoidRef(-30)).toBeGreaterThan(0);
  });

  it('backward matches central finite differences', () => {
    const rng = new Rng(11);
    const n = 9;
    const g = Float64Array.from(rng.normalArray(n, 3));
    const u = Float64Array.from(rng.normalArray(n));
    const R = Float64Array.from(rng.normalArray(n));
    const L = (): number => swigluForwardRef(g, u).reduce((s, h, i) => s + h * R[i], 0);
    const { dgate, dup } = swigluBackwardRef(g, u, R);
    const h = 1e-6;
    const fd = (arr: Float64Array, i: number): number => {
      const o = arr[i];
      arr[i] = o + h;
      const a = L();
      arr[i] = o - h;
      const b = L();
      arr[i] = o;
      return (a - b) / (2 * h);
    };
    expectClose(dgate, Array.from(g, (_, i) => fd(g, i)), { atol: 1e-8, rtol: 1e-6, label: 'dgate' });
    expectClose(dup, Array.from(u, (_, i) => fd(u, i)), { atol: 1e-8, rtol: 1e-6, label: 'dup' });
  });
});
