/** References of the quantized GEMMs (src/engine/kernels/qgemm/qgemm.ref.ts): pure TS. */
import { describe, expect, it } from 'vitest';
import {
  dequantizeRowGroupsRef, gemmNTRef, qgemmI8Ref, qgemmQuantOutRef, qgemmWeightOnlyRef, quantizeRowGroupsRef,
} from '../../src/engine/kernels/qgemm/qgemm.ref';
import { QUANT_FORMATS } from '../../src/engine/quant/formats';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('qgemm references', () => {
  it('gemmNTRef is X·Wᵀ with W stored [N, K]', () => {
    // X = [[1, 2], [3, 4], [5, 6]], W = [[1, 0], [0, 1], [1, 1], [2, -1]]
    const c = gemmNTRef([1, 2, 3, 4, 5, 6], [1, 0, 0, 1, 1, 1, 2, -1], 3, 4, 2);
    expect(Array.from(c)).toEqual([1, 2, 3, 0, 3, 4, 7, 2, 5, 6, 11, 4]);
  });

  it.each(QUANT_FORMATS)('row groups equal quantizeRef flat groups when G | row length (%s)', (fmt) => {
    const x = new Rng(1).normalArray(6 * 64);
    const q = quantizeRowGroupsRef(x, 6, 64, fmt, 32);
    const flat = quantizeRef(x, fmt, { kind: 'group', size: 32 });
    expect(Array.from(q.codes)).toEqual(Array.from(flat.words));
    expect(Array.from(q.scales)).toEqual(Array.from(flat.scales));
    expect(Array.from(dequantizeRowGroupsRef(q.codes, q.scales, 6, 64, fmt, 32))).toEqual(Array.from(dequantizeRef(flat)));
  });

  it('row groups restart at each row when G does not divide it', () => {
    const rows = 3;
    const cols = 40; // groups of 32: [0, 32) and a partial [32, 40) per row
    const x = new Rng(2).normalArray(rows * cols);
    x[35] = 100; // row 0's partial group only
    const q = quantizeRowGroupsRef(x, rows, cols, 'int8', 32);
    expect(q.scales.length).toBe(rows * 2);
    expect(q.scales[1]).toBe(Math.fround(100 / 127));
    expect(q.scales[3]).toBeLessThan(0.1);
    const back = dequantizeRowGroupsRef(q.codes, q.scales, rows, cols, 'int8', 32);
    for (let r = 0; r < rows; r++) {
      const row = Array.from(x.subarray(r * cols, (r + 1) * cols));
      const ref = dequantizeRef(quantizeRef(row, 'int8', { kind: 'group', size: 32 }));
      expect(Array.from(back.subarray(r * cols, (r + 1) * cols))).toEqual(Array.from(ref));
    }
    expect(() => quantizeRowGroupsRef(x, 4, 30, 'int4', 32)).toThrow(/multiple of 8/);
  });

  it('the quantized GEMM references are GEMMs of the dequantized operands', () => {
    const [M, N, K] = [3, 5, 16];
    const rng = new Rng(3);
    const x = rng.normalArray(M * K);
    const w = rng.normalArray(N * K);
    const qx = quantizeRef(x, 'int8', { kind: 'row', rowLength: K });
    const qw = quantizeRef(w, 'int8', { kind: 'row', rowLength: K });
    expectClose(qgemmI8Ref(qx.words, qx.scales, qw.words, qw.scales, M, N, K),
      gemmNTRef(dequantizeRef(qx), dequantizeRef(qw), M, N, K), { atol: 0, rtol: 0, label: 'i8' });
    const wq = quantizeRowGroupsRef(w, N, K, 'int4', 8);
    expectClose(qgemmWeightOnlyRef(x, wq.codes, wq.scales, 'int4', 8, M, N, K),
      gemmNTRef(x, dequantizeRowGroupsRef(wq.codes, wq.scales, N, K, 'int4', 8), M, N, K), { atol: 0, rtol: 0, label: 'w4' });
    // Quantization error of the int8 GEMM is INT8-sized, not zero and not huge.
    const exact = gemmNTRef(x, w, M, N, K);
    const approx = qgemmI8Ref(qx.words, qx.scales, qw.words, qw.scales, M, N, K);
    const err = Math.max(...Array.from(exact, (v, i) => Math.abs(v - approx[i])));
    expect(err).toBeGreaterThan(0);
    expect(err).toBeLessThan(0.2);
    const out = qgemmQuantOutRef(x, w, 4, 8, M, 8, K);
    expect(out.scales.length).toBe(M);
    expect(Array.from(out.c)).toEqual(Array.from(Float32Array.from(gemmNTRef(x, w.subarray(0, 8 * K), M, 8, K))));
  });
});
