/**
 * NF4 on the GPU against its plain-TS reference (src/engine/quant/nf4.ts, quantizeRef): the fused
 * and the four-pass quantizers code for code, the fp32 and f16 dequantizers value for value (what
 * QLoRA's dX and f16 GEMMs read), and the weight-only GEMM's in-tile table decode.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { qgemmWeightOnly } from '../../src/engine/kernels/qgemm/qgemm';
import { gemmNTRef, qgemmWeightOnlyRef, quantizeRowGroupsRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { buildDequantize, buildQuantize, type QuantizePath, type QuantizeSpec } from '../../src/engine/kernels/quantize/quantize';
import { dequantizeF16Ref } from '../../src/engine/kernels/quantize/quantize.ref';
import { NF4_TABLE, NF4_THRESHOLDS } from '../../src/engine/quant/nf4';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { absOf, expectGemmClose } from '../helpers/qgemm';

let rt: Runtime;
beforeAll(async () => {
  rt = await testRuntime();
});

const bitsOf = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0];
const fromBits = (b: number) => new Float32Array(Uint32Array.of(b >>> 0).buffer)[0];

/**
 * Groups of G: normal weights with outliers; all zeros; every table value and every threshold hit
 * exactly (absmax 1/4, a power of two, so x/s is exact) and one ulp beside; non-finite values.
 */
function nf4Data(n: number, G: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const x = new Float32Array(n);
  const pts = [...NF4_TABLE, ...NF4_THRESHOLDS];
  for (let g0 = 0, k = 0; g0 < n; g0 += G, k++) {
    const len = Math.min(G, n - g0);
    for (let j = 0; j < len; j++) {
      switch (k % 4) {
        case 0:
          x[g0 + j] = rng.normal() * 0.05 * (j % 11 === 3 ? 6 : 1);
          break;
        case 1:
          break;
        case 2:
          x[g0 + j] = j === 0 ? 0.25 : fromBits(bitsOf(Math.fround(pts[rng.int(pts.length)] / 4)) + [0, 1, -1][j % 3]);
          break;
        default:
          x[g0 + j] = j === 1 ? NaN : j === 2 ? -Infinity : rng.normal();
      }
    }
  }
  return x;
}

const diff = (a: ArrayLike<number>, b: ArrayLike<number>) => Array.from(b).filter((v, i) => !Object.is(a[i], v)).length;

describe('NF4 kernels equal the plain-TS reference', () => {
  it.each(['fused', 'passes'] as QuantizePath[])('%s quantize, fp32 and f16 dequantize', async (path) => {
    for (const [G, n] of [[64, 64 * 12], [32, 32 * 9 + 24]]) {
      const x = nf4Data(n, G, G + n);
      const spec: QuantizeSpec = { format: 'nf4', granularity: { kind: 'group', size: G }, n };
      const xb = rt.upload('workspace', 'nf4.x', x);
      const q = buildQuantize(rt, spec, xb, { path });
      const d = buildDequantize(rt, spec, q.words, q.scales, { path });
      const f16 = n % 4 === 0 ? buildDequantize(rt, spec, q.words, q.scales, { f16: 'twin' }) : null;
      rt.run([...q.dispatches, ...d.dispatches, ...(f16?.dispatches ?? [])]);
      const want = quantizeRef(x, 'nf4', spec.granularity);
      const tag = `${path} G=${G} n=${n}`;
      expect(q.path, tag).toBe(path);
      expect(diff(await rt.readF32(q.scales, 0, q.numScales), want.scales), `${tag} scales`).toBe(0);
      expect(diff(await rt.readU32(q.words, 0, q.numWords), want.words), `${tag} words`).toBe(0);
      expect(diff(await rt.readF32(d.out, 0, n), dequantizeRef(want)), `${tag} dequantized`).toBe(0);
      if (f16) expect(diff(await rt.readF32(f16.out, 0, n), dequantizeF16Ref(want)), `${tag} f16`).toBe(0);
      for (const k of [q, d, f16]) k?.destroy();
      rt.mem.free(xb);
    }
  });

  it('refuses stochastic rounding in words', () => {
    const xb = rt.createBuffer('workspace', 'nf4.sr', 256);
    expect(() => buildQuantize(rt, { format: 'nf4', granularity: { kind: 'group', size: 64 }, n: 64 }, xb, { rounding: 'stochastic' }))
      .toThrow(/nearest rounding only/);
    rt.mem.free(xb);
  });

  it('weight-only GEMM: NF4 codes decoded through the table while staged (partial last group too)', async () => {
    for (const [M, N, K, G] of [[7, 65, 128, 64], [9, 20, 96, 64]]) {
      const rng = new Rng(M + N + K);
      const x = rng.normalArray(M * K);
      const w = rng.normalArray(N * K, 0.05);
      const q = quantizeRowGroupsRef(w, N, K, 'nf4', G);
      const bufs = [rt.upload('activations', 'x', x), rt.upload('weights', 'wq', q.codes), rt.upload('weights', 'ws', q.scales), rt.createBuffer('activations', 'c', M * N * 4)];
      const [xb, wq, ws, c] = bufs;
      rt.run([qgemmWeightOnly(rt, { label: 'qgemm.nf4', x: xb, wq, ws, c, format: 'nf4', G, M, N, K, tiles: { BM: 32, BN: 64, TM: 4, TN: 4, BK: 8 } })]);
      expectGemmClose(await rt.readF32(c, 0, M * N), qgemmWeightOnlyRef(x, q.codes, q.scales, 'nf4', G, M, N, K),
        gemmNTRef(absOf(x), absOf(w), M, N, K), `nf4 ${M}x${N}x${K}`);
      for (const b of bufs) rt.mem.free(b);
    }
  });
});
