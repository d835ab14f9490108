/**
 * The model's INT8 GEMMs (src/engine/model/int8-gemms.ts) against a fake-quantization simulation
 * with the same quantizers in plain TS: quantizeRef codes, dequantized, then the GEMM in float64.
 * The GPU multiplies the codes exactly in integers, so the only difference left is fp32 rounding
 * of the epilogue and of the block sums.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { quantizeTransposedI8Ref, transposeRef } from '../../src/engine/kernels/qgemm/block.ref';
import { gemmNTRef, qgemmI8ExactRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { modelDims } from '../../src/engine/model/dims';
import { int8Buffers } from '../../src/engine/model/compute-plan';
import { Int8Gemms } from '../../src/engine/model/int8-gemms';
import { PRESETS } from '../../src/engine/model/config';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';
import { absOf, expectGemmClose } from '../helpers/qgemm';

const { up, track } = trackBuffers();

const fq = (x: Float32Array, K: number) => dequantizeRef(quantizeRef(x, 'int8', { kind: 'row', rowLength: K }));

describe('Int8Gemms (forward, dX, dW) against the fake-quant simulation', async () => {
  const rt = await testRuntime();
  const dims = modelDims(PRESETS.micro, 2, 32); // N = 64 tokens, C 32, F 64
  const { N, C, F } = dims;
  const compute = { forward: 'int8', dx: 'int8', dw: 'int8', dwBlock: 32, gradRounding: 'nearest', attentionQk: 'fp32', attentionDp: 'fp32' } as const;
  // Shared by the tests (trackBuffers frees only per-test uploads); one layer per dW granularity.
  const bufs = new Map(int8Buffers(dims, [{ compute }, { compute: { ...compute, dwBlock: 'all' as const } }], true).map((s) => [s.key, rt.createBuffer('workspace', s.key, s.bytes)]));
  afterAll(() => bufs.forEach((b) => rt.mem.free(b)));
  const g = new Int8Gemms(rt, dims, (k) => bufs.get(k)!, () => {});
  const rng = new Rng(5);
  // gate_proj's shapes: X [N, C], W [F, C], dY [N, F].
  const x = rng.normalArray(N * C);
  x[3] = 9; // an outlier token
  const w = rng.normalArray(F * C, 0.1);
  const dy = rng.normalArray(N * F, 0.01);

  it('forward: Y += Q(X)·Q(W)ᵀ, X per token, W per output channel', async () => {
    const y0 = rng.normalArray(N * F);
    const out = up(rt, y0);
    rt.run([...g.quantizeRows('fwd', up(rt, x), N, C), ...g.forward('L0.gate_proj', up(rt, w), out, N, F, C, true)]);
    const sim = gemmNTRef(fq(x, C), fq(w, C), N, F, C).map((v, i) => v + y0[i]);
    const abs = gemmNTRef(absOf(x), absOf(w), N, F, C).map((v, i) => v + Math.abs(y0[i]));
    expectGemmClose(await rt.readF32(out, 0, N * F), sim, abs, 'forward');
  });

  it('dX = Q(dY)·Q(W), dY per token, W per input channel', async () => {
    const out = track(rt.createBuffer('workspace', 'dx', N * C * 4));
    rt.run(g.dx('L0.gate.dx', up(rt, dy), up(rt, w), out, N, C, F, false, 'nearest'));
    // W per input channel = Wᵀ [C, F] per row; dX = Q(dY) · (Q(Wᵀ))ᵀ as an NT GEMM.
    const wT = dequantizeRef(quantizeTransposedI8Ref(w, F, C, F));
    const sim = gemmNTRef(fq(dy, F), wT, N, C, F);
    expectGemmClose(await rt.readF32(out, 0, N * C), sim, gemmNTRef(absOf(dy), absOf(transposeRef(w, F, C)), N, C, F), 'dx');
  });

  it('dW = Q(dY)ᵀ·Q(X), both per channel in blocks of 32 tokens', async () => {
    const out = track(rt.createBuffer('workspace', 'dw', F * C * 4));
    rt.run([...g.dwInput('L0.gate.dw', up(rt, x), C, 32), ...g.dw('L0.gate.dw', up(rt, dy), F, C, out, 32, 'nearest')]);
    const dyT = dequantizeRef(quantizeTransposedI8Ref(dy, N, F, 32)); // [F, N]
    const xT = dequantizeRef(quantizeTransposedI8Ref(x, N, C, 32)); // [C, N]
    const sim = gemmNTRef(dyT, xT, F, C, N);
    const abs = gemmNTRef(absOf(transposeRef(dy, N, F)), absOf(transposeRef(x, N, C)), F, C, N);
    expectGemmClose(await rt.readF32(out, 0, F * C), sim, abs, 'dw');
    expect(g.paths.get('L0.gate.dw')).toBe('int8-dot4');
    expect(g.paths.get('L0.gate_proj')).toBe('int8-dot4'); // SwiftShader: no tensor cores
  });

  it('dW = Q(dY)ᵀ·Q(X), both per channel over all tokens: qgemmI8 on the transposed codes, integer parts exact', async () => {
    const out = track(rt.createBuffer('workspace', 'dw', F * C * 4));
    rt.run([...g.dwInput('L1.gate.dw', up(rt, x), C, 'all'), ...g.dw('L1.gate.dw', up(rt, dy), F, C, out, 'all', 'nearest')]);
    const dyQ = quantizeTransposedI8Ref(dy, N, F, N); // [F, N], one scale per output channel
    const xQ = quantizeTransposedI8Ref(x, N, C, N); // [C, N], one per input channel
    // The operands are the reference quantizer's codes, and the GEMM sums them exactly.
    expect(Array.from(await rt.readU32(bufs.get('i8.gt')!, 0, (F * N) / 4))).toEqual(Array.from(dyQ.words));
    expect(Array.from(await rt.readU32(bufs.get('i8.xt')!, 0, (C * N) / 4))).toEqual(Array.from(xQ.words));
    const i8 = (w: Uint32Array) => new Int8Array(w.buffer.slice(0));
    const exact = qgemmI8ExactRef(i8(dyQ.words), dyQ.scales, i8(xQ.words), xQ.scales, F, C, N);
    const got = await rt.readF32(out, 0, F * C);
    expect(Array.from(got)).toEqual(Array.from(exact));
    const sim = gemmNTRef(dequantizeRef(dyQ), dequantizeRef(xQ), F, C, N);
    const abs = gemmNTRef(absOf(transposeRef(dy, N, F)), absOf(transposeRef(x, N, C)), F, C, N);
    expectGemmClose(got, sim, abs, 'dw all');
    expect(g.paths.get('L1.gate.dw')).toBe('int8-dot4'); // qgemmI8's path: tensor cores where enabled
  });
});
