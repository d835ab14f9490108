/**
 * Quantized GEMMs (a) INT8×INT8 and (b) weight-only, against "dequantize with the TS codec, then
 * GEMM in float64": the tolerance covers only summation order. Tile configurations are kept small
 * (BK = 8) where the defaults are not under test: SwiftShader compile time grows with the unrolled
 * K loop.
 */
import { describe, expect, it } from 'vitest';
import { type GemmTiles, qgemmI8, qgemmWeightOnly, quantizeRowsI8 } from '../../src/engine/kernels/qgemm/qgemm';
import { gemmNTRef, qgemmI8Ref, qgemmWeightOnlyRef, quantizeRowGroupsRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import type { QuantFormat } from '../../src/engine/quant/formats';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { absOf, expectGemmClose } from '../helpers/qgemm';

// M, N, K: single element, odd M/N around tile edges, K not a multiple of the K tile.
const SHAPES: [number, number, number][] = [[1, 1, 4], [7, 65, 36], [65, 33, 132]];

describe('qgemm (a) INT8 × INT8 with dot4I8Packed', () => {
  const tiles: [string, GemmTiles | undefined][] = [
    ['default 64×64, 4×4, BK 8 words', undefined],
    ['32×64, 8×8 threads, BK 4 words', { BM: 32, BN: 64, TM: 8, TN: 8, BK: 4 }],
  ];
  it.each(tiles)('tiles %s', async (_, t) => {
    const rt = await testRuntime();
    for (const [M, N, K] of SHAPES) {
      const rng = new Rng(M * 1000 + N * 10 + K);
      const x = rng.normalArray(M * K);
      const w = rng.normalArray(N * K, 0.05);
      x[0] = 40; // an outlier token row: its scale differs from the others
      const xb = rt.upload('activations', 'x', x);
      // X quantized on the GPU (the shared absmax quantizer), W by the reference, per output row.
      const qx = quantizeRowsI8(rt, { x: xb, M, K });
      const qw = quantizeRef(w, 'int8', { kind: 'row', rowLength: K });
      const wq = rt.upload('weights', 'wq', qw.words);
      const sw = rt.upload('weights', 'sw', qw.scales);
      const c = rt.createBuffer('activations', 'c', M * N * 4);
      const d = qgemmI8(rt, { label: 'qgemm.i8', xq: qx.words, sx: qx.scales, wq, sw, c, M, N, K, tiles: t });
      rt.run([...qx.dispatches, d]);
      const refQx = quantizeRef(x, 'int8', { kind: 'row', rowLength: K });
      const xq = await rt.readU32(qx.words, 0, (M * K) / 4);
      const sx = await rt.readF32(qx.scales, 0, M);
      expect(Array.from(xq), 'X codes').toEqual(Array.from(refQx.words));
      expect(Array.from(sx), 'X scales').toEqual(Array.from(refQx.scales));
      const got = await rt.readF32(c, 0, M * N);
      const ref = qgemmI8Ref(xq, sx, qw.words, qw.scales, M, N, K);
      const absRef = gemmNTRef(absOf(dequantizeRef(refQx)), absOf(dequantizeRef(qw)), M, N, K);
      expectGemmClose(got, ref, absRef, `i8 ${M}x${N}x${K}`);
      // Quantization error is a metric, not a pass/fail: only check it is in INT8's ballpark.
      const exact = gemmNTRef(x, w, M, N, K);
      let e2 = 0;
      let r2 = 0;
      for (let i = 0; i < exact.length; i++) {
        e2 += (got[i] - exact[i]) ** 2;
        r2 += exact[i] ** 2;
      }
      expect(Math.sqrt(e2 / r2), 'relative error vs fp64 GEMM').toBeLessThan(0.05);
      qx.destroy();
      for (const b of [xb, wq, sw, c]) rt.mem.free(b);
    }
  });

  it('rejects K not a multiple of 4', async () => {
    const rt = await testRuntime();
    const b = rt.createBuffer('workspace', 'b', 64);
    expect(() => qgemmI8(rt, { label: 'bad', xq: b, sx: b, wq: b, sw: b, c: b, M: 1, N: 1, K: 6 })).toThrow(/multiple of 4/);
    rt.mem.free(b);
  });
});

describe('qgemm (b) weight-only: group-quantized W dequantized while staged', () => {
  const small: GemmTiles = { BM: 32, BN: 64, TM: 4, TN: 4, BK: 8 };
  // format, G, [M, N, K][]: K % G != 0 gives each row a partial last group.
  const cases: [QuantFormat, number, [number, number, number][]][] = [
    ['int4', 32, [[7, 65, 96], [33, 20, 136]]],
    ['int8', 32, [[65, 9, 72]]],
    ['fp8-e4m3', 64, [[5, 70, 160]]],
  ];
  it.each(cases)('%s G=%i', async (format, G, shapes) => {
    const rt = await testRuntime();
    for (const [M, N, K] of shapes) {
      const rng = new Rng(G + M + N + K);
      const x = rng.normalArray(M * K);
      const w = rng.normalArray(N * K, 0.05);
      for (let i = 0; i < w.length; i += 37) w[i] *= 8; // outliers: groups get different scales
      const q = quantizeRowGroupsRef(w, N, K, format, G);
      if (K % G === 0) {
        // Row groups are quantizeRef's flat groups when G divides K.
        expect(Array.from(q.codes)).toEqual(Array.from(quantizeRef(w, format, { kind: 'group', size: G }).words));
      }
      const xb = rt.upload('activations', 'x', x);
      const wq = rt.upload('weights', 'wq', q.codes);
      const ws = rt.upload('weights', 'ws', q.scales);
      const c = rt.createBuffer('activations', 'c', M * N * 4);
      rt.run([qgemmWeightOnly(rt, { label: 'qgemm.w', x: xb, wq, ws, c, format, G, M, N, K, tiles: small })]);
      const got = await rt.readF32(c, 0, M * N);
      const ref = qgemmWeightOnlyRef(x, q.codes, q.scales, format, G, M, N, K);
      expectGemmClose(got, ref, gemmNTRef(absOf(x), absOf(w), M, N, K), `${format} ${M}x${N}x${K}`);
      for (const b of [xb, wq, ws, c]) rt.mem.free(b);
    }
  });

  it('rejects INT4 rows that are not whole words', async () => {
    const rt = await testRuntime();
    const b = rt.createBuffer('workspace', 'b', 64);
    expect(() => qgemmWeightOnly(rt, { label: 'bad', x: b, wq: b, ws: b, c: b, format: 'int4', G: 32, M: 1, N: 1, K: 12 }))
      .toThrow(/multiple of 8/);
    rt.mem.free(b);
  });
});
