import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crossEntropyBackwardRef, crossEntropyForwardRef } from '../../src/engine/kernels/crossentropy/crossentropy.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('cross-entropy reference', () => {
  it('gives log(V) for uniform logits and ignores negative / out-of-range targets', () => {
    const r = crossEntropyForwardRef([0, 0, 0, 0, 5, 1, 2, 3], [2, -1], 2, 4);
    expect(r.loss).toBeCloseTo(Math.log(4), 14);
    expect(r.count).toBe(1);
    expect(r.losses[1]).toBe(0);
    const none = crossEntropyForwardRef([1, 2], [-100], 1, 2);
    expect(none.loss).toBe(0);
    expect(crossEntropyForwardRef([1, 2], [2], 1, 2).count).toBe(0);
  });

  it('backward matches central finite differences of the mean loss', () => {
    const rng = new Rng(9);
    const N = 4;
    const V = 5;
    const logits = Float64Array.from(rng.normalArray(N * V, 2));
    const targets = [3, -1, 0, 4];
    const d = crossEntropyBackwardRef(logits, targets, N, V);
    const h = 1e-6;
    const fd = Array.from(logits, (_, i) => {
      const o = logits[i];
      logits[i] = o + h;
      const a = crossEntropyForwardRef(logits, targets, N, V).loss;
      logits[i] = o - h;
      const b = crossEntropyForwardRef(logits, targets, N, V).loss;
      logits[i] = o;
      return (a - b) / (2 * h);
    });
    expectClose(d, fd, { atol: 1e-8, rtol: 1e-6 });
  });

  it('property: loss >= 0, dlogits rows sum to 0, ignored rows have zero gradient, shift invariance', () => {
    const arb = fc.record({
      N: fc.integer({ min: 1, max: 6 }),
      V: fc.integer({ min: 1, max: 9 }),
      seed: fc.integer({ min: 0, max: 1 << 30 }),
      scale: fc.double({ min: 0.01, max: 80, noNaN: true }),
    });
    fc.assert(
      fc.property(arb, ({ N, V, seed, scale }) => {
        const rng = new Rng(seed);
        const logits = Float64Array.from(rng.normalArray(N * V, scale));
        const targets = Array.from({ length: N }, () => rng.int(V + 2) - 1); // -1 .. V: some ignored
        const f = crossEntropyForwardRef(logits, targets, N, V);
        const d = crossEntropyBackwardRef(logits, targets, N, V);
        expect(f.loss).toBeGreaterThanOrEqual(0);
        for (let n = 0; n < N; n++) {
          let s = 0;
          let sAbs = 0;
          for (let i = 0; i < V; i++) {
            s += d[n * V + i];
            sAbs += Math.abs(d[n * V + i]);
          }
          expect(Math.abs(s)).toBeLessThanOrEqual(1e-12);
          expect(f.losses[n]).toBeGreaterThanOrEqual(0);
          if (targets[n] < 0 || targets[n] >= V) expect(sAbs).toBe(0);
        }
        const shifted = crossEntropyForwardRef(logits.map((x) => x + 3.5), targets, N, V);
        expect(Math.abs(shifted.loss - f.loss)).toBeLessThanOrEqual(1e-9 * (1 + f.loss));
      }),
      { numRuns: 200, seed: 42 },
    );
  });
});
