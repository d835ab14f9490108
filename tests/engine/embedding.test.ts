import { describe, expect, it } from 'vitest';
import { embeddingBackwardRef, embeddingForwardRef } from '../../src/engine/kernels/embedding/embedding.ref';
import { embeddingWorkspaceBytes } from '../../src/engine/kernels/embedding/embedding';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('embedding reference', () => {
  it('gathers rows and reads out-of-range ids as zero rows', () => {
    const W = [1, 2, 3, 4, 5, 6]; // V=3, C=2
    expectClose(embeddingForwardRef([2, 0, -1, 3, 1], W, 5, 3, 2), [5, 6, 1, 2, 0, 0, 0, 0, 3, 4], { atol: 0 });
  });

  it('backward matches central finite differences, repeated ids included', () => {
    const rng = new Rng(3);
    const N = 6;
    const V = 4;
    const C = 3;
    const ids = [1, 3, 1, 1, 7, -2];
    const W = Float64Array.from(rng.normalArray(V * C));
    const R = Float64Array.from(rng.normalArray(N * C));
    const L = (): number => embeddingForwardRef(ids, W, N, V, C).reduce((s, y, i) => s + y * R[i], 0);
    const dW = embeddingBackwardRef(ids, R, N, V, C);
    const h = 1e-6;
    const fd = Array.from(W, (_, i) => {
      const o = W[i];
      W[i] = o + h;
      const a = L();
      W[i] = o - h;
      const b = L();
      W[i] = o;
      return (a - b) / (2 * h);
    });
    expectClose(dW, fd, { atol: 1e-8, rtol: 1e-7 });
    // Rows 0 and 2 are never looked up; ids 7 and -2 are out of range and contribute nothing.
    expect(Array.from(dW.subarray(0, C))).toEqual([0, 0, 0]);
    expect(Array.from(dW.subarray(2 * C, 3 * C))).toEqual([0, 0, 0]);
  });

  it('accumulates into an existing dW and sizes its workspace', () => {
    const dW = embeddingBackwardRef([0], [1, 2], 1, 2, 2, [10, 10, 10, 10]);
    expectClose(dW, [11, 12, 10, 10], { atol: 0 });
    expect(embeddingWorkspaceBytes({ N: 1000, V: 65 })).toBe((2 * 65 + 1 + 1000) * 4);
  });
});
