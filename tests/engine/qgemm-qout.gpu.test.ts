/**
 * Quantized GEMM (c): C written INT4/INT8 group-quantized along N in the epilogue, against "fp32
 * GEMM, then quantizeRef"; plus the plain fp32 path of the same kernel.
 */
import { describe, expect, it } from 'vitest';
import { type GemmTiles, qgemmF32, qgemmQuantOut } from '../../src/engine/kernels/qgemm/qgemm';
import { gemmNTRef, qgemmQuantOutRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';
import { absOf, expectGemmClose } from '../helpers/qgemm';

describe('qgemm (c) INT4/INT8 group quantization of C in the epilogue', () => {
  // bits, G, M, N, K, tiles (undefined = defaults)
  const cases: [4 | 8, number, number, number, number, GemmTiles | undefined][] = [
    [8, 32, 7, 64, 36, { BM: 32, BN: 64, TM: 4, TN: 4, BK: 8 }],
    [4, 64, 65, 72, 20, { BM: 32, BN: 64, TM: 4, TN: 8, BK: 8 }], // N % G != 0; two column tiles
    [4, 128, 9, 256, 12, undefined], // defaults: BN = 128, BM = 32, TN = 8
  ];
  it.each(cases)('int%i G=%i M=%i N=%i K=%i', async (bits, G, M, N, K, tiles) => {
    const rt = await testRuntime();
    const rng = new Rng(bits * G + M);
    const x = rng.normalArray(M * K);
    const w = rng.normalArray(N * K, 0.2);
    for (let n = 0; n < N; n += 29) w[n * K] = 3; // a few hot output columns
    for (let k = 0; k < K; k++) w[(N - 1) * K + k] = 0; // and one all-zero column
    const xb = rt.upload('activations', 'x', x);
    const wb = rt.upload('weights', 'w', w);
    const cpw = 32 / bits;
    const ng = Math.ceil(N / G);
    const cq = rt.createBuffer('activations', 'cq', ((M * N) / cpw) * 4);
    const cs = rt.createBuffer('activations', 'cs', M * ng * 4);
    rt.run([qgemmQuantOut(rt, { label: 'qgemm.qout', x: xb, w: wb, cq, cs, bits, G, M, N, K, tiles })]);
    const codes = await rt.readU32(cq, 0, (M * N) / cpw);
    const scales = await rt.readF32(cs, 0, M * ng);
    const ref = qgemmQuantOutRef(x, w, bits, G, M, N, K);
    if (N % G === 0) {
      // "fp32 GEMM followed by quantizeRef", literally (the row-group layout is the flat one then).
      const flat = quantizeRef(ref.c, bits === 4 ? 'int4' : 'int8', { kind: 'group', size: G });
      expect(Array.from(flat.words)).toEqual(Array.from(ref.codes));
      expect(Array.from(flat.scales)).toEqual(Array.from(ref.scales));
    }
    // The GPU's fp32 C differs from the reference's by summation order only: scales agree to a few
    // ulps, and a code may move by one step where c/s sits on a rounding boundary (rare, counted).
    expectClose(scales, ref.scales, { atol: 0, rtol: 1e-5, label: 'scales' });
    const mask = (1 << bits) - 1;
    let diff = 0;
    for (let i = 0; i < M * N; i++) {
      const a = (codes[Math.floor(i / cpw)] >>> (bits * (i % cpw))) & mask;
      const b = (ref.codes[Math.floor(i / cpw)] >>> (bits * (i % cpw))) & mask;
      if (a !== b) {
        diff++;
        const sa = (a << (32 - bits)) >> (32 - bits);
        const sb = (b << (32 - bits)) >> (32 - bits);
        expect(Math.abs(sa - sb), `code ${i}`).toBe(1);
      }
    }
    expect(diff, 'codes off by one step').toBeLessThanOrEqual(Math.max(2, (M * N) / 500));
    for (const b of [xb, wb, cq, cs]) rt.mem.free(b);
  });

  it('rejects groups that straddle a column tile', async () => {
    const rt = await testRuntime();
    const b = rt.createBuffer('workspace', 'b', 64);
    expect(() => qgemmQuantOut(rt, { label: 'bad', x: b, w: b, cq: b, cs: b, bits: 8, G: 128, M: 1, N: 128, K: 4,
      tiles: { BN: 64 } })).toThrow(/divide BN/);
    rt.mem.free(b);
  });
});

describe('qgemm fp32 × fp32 path of the same kernel', () => {
  it('matches the float64 GEMM with 8×8 thread tiles', async () => {
    const rt = await testRuntime();
    const [M, N, K] = [37, 71, 52];
    const rng = new Rng(5);
    const x = rng.normalArray(M * K);
    const w = rng.normalArray(N * K);
    const xb = rt.upload('activations', 'x', x);
    const wb = rt.upload('weights', 'w', w);
    const c = rt.createBuffer('activations', 'c', M * N * 4);
    rt.run([qgemmF32(rt, { label: 'qgemm.f32', x: xb, w: { kind: 'f32', w: wb }, out: { kind: 'f32', c }, M, N, K,
      tiles: { BM: 32, BN: 64, TM: 8, TN: 8, BK: 8 } })]);
    expectGemmClose(await rt.readF32(c, 0, M * N), gemmNTRef(x, w, M, N, K), gemmNTRef(absOf(x), absOf(w), M, N, K), 'f32');
    for (const b of [xb, wb, c]) rt.mem.free(b);
  });
});
