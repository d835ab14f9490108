/**
 * The f16 GEMMs on the test device. SwiftShader has no `shader-f16` (nor subgroup matrices), so
 * what runs here: the SIMT kernel's f32 twin (the same generated code over f32 storage holding f16
 * values: every index, bound, form, split and epilogue) against the f16 reference, and the
 * fallback (no shader-f16 → no f16 path, callers keep fp32). The f16 kernels themselves compile and
 * run only where the feature is present (the lent GPU: bench/f16-device.ts); those tests skip here.
 */
import { describe, expect, it } from 'vitest';
import { wgslErrors } from '../../src/engine/gpu/pipelines';
import {
  buildMatmulF16, checkF16Tc, checkMatmulF16, enableF16TensorCores, f16PathFor, f16TcSpecForOutput, f16TensorCoreSpec, f16TensorCoreSpecFor,
  uploadF16,
} from '../../src/engine/kernels/matmul-f16/matmul-f16';
import {
  F16_TC_LAYOUTS, f16ConfigsOf, f16TcSpecError, type F16TcSpec, FORM_TRANS, type GemmForm, GEMM_FORMS, vec4Operands,
} from '../../src/engine/kernels/matmul-f16/plan';
import { simtF16Code } from '../../src/engine/kernels/matmul-f16/simt';
import { f16TcCode } from '../../src/engine/kernels/matmul-f16/tc';
import { testRuntime } from '../helpers/gpu';

const rt = await testRuntime();
const hasF16 = rt.gpu.features.shaderF16;
const hasF16Tc = hasF16 && rt.gpu.features.subgroupMatrix && f16ConfigsOf(rt.gpu.subgroupMatrixConfigs).length > 0;

describe('f16 SIMT GEMM (its f32 twin, runnable without shader-f16)', () => {
  it('matches the f16 reference for each form on awkward shapes (vec4 and scalar loads)', async () => {
    const dims = [1, 7, 63, 65];
    const shapes = [...dims.map((d) => [d, 65 - d + 1, 63]), [65, 63, 7], [7, 65, 1], [64, 68, 72], [63, 64, 65]];
    for (const form of GEMM_FORMS) {
      for (const [M, N, K] of shapes) {
        const r = await checkMatmulF16(rt, { M, N, K, ...FORM_TRANS[form] }, { path: 'f16-simt', elem: 'f32' });
        expect([form, M, N, K, r.error, r.bad]).toEqual([form, M, N, K, undefined, 0]);
      }
    }
    // Sampled comparison (what the device bundle uses on the model's shapes).
    const sampled = await checkMatmulF16(rt, { M: 130, N: 68, K: 96, transA: true, transB: false }, { path: 'f16-simt', elem: 'f32', samples: 200 });
    expect([sampled.error, sampled.bad]).toEqual([undefined, 0]);
    // Both load kinds ran: shapes with whole-vec4 rows and without.
    expect(vec4Operands('NN', { M: 64, N: 68, K: 72 })).toEqual({ a: true, b: true });
    expect(vec4Operands('NN', { M: 1, N: 65, K: 63 })).toEqual({ a: false, b: false });
  });

  it('alpha, accumulate and split-K', async () => {
    for (const form of GEMM_FORMS) {
      const base = { M: 65, N: 68, K: 100, ...FORM_TRANS[form] };
      for (const c of [{ ...base, alpha: 0.25 }, { ...base, alpha: -2, accumulate: true }, { ...base, split: 3 }, { ...base, split: 2, alpha: 0.5, accumulate: true }]) {
        const r = await checkMatmulF16(rt, c, { path: 'f16-simt', elem: 'f32' });
        expect([form, c, r.error, r.bad]).toEqual([form, c, undefined, 0]);
      }
    }
  });

  it('splits a thin grid over K when given a workspace', async () => {
    const M = 64;
    const N = 64;
    const K = 8192;
    const a = rt.upload('workspace', 'a', new Float32Array(M * K));
    const b = rt.upload('workspace', 'b', new Float32Array(K * N));
    const c = rt.createBuffer('workspace', 'c', M * N * 4);
    const ws = rt.createBuffer('workspace', 'ws', 16 * M * N * 4);
    try {
      const built = buildMatmulF16(rt, { label: 'thin', M, N, K, a, b, c, transA: true, workspace: ws, elem: 'f32' });
      expect(built.parts).toBeGreaterThan(1);
      expect(built.dispatches).toHaveLength(2);
      built.uniforms.forEach((u) => rt.mem.free(u));
    } finally {
      [a, b, c, ws].forEach((x) => rt.mem.free(x));
    }
  });
});

describe('f16 tensor-core GEMM with emulated subgroup matrices (f32, runnable without them)', () => {
  it('passes every device-check case per form: staging, prefetch, col_major operands, direct and scratch epilogues, split-K', async () => {
    const specs: Omit<F16TcSpec, 'transA' | 'transB'>[] = [
      { cfg: { M: 8, N: 8, K: 8 }, sgSize: 16, tilesM: 2, tilesN: 1, sgM: 2, sgN: 1, BK: 16, PAD: 4, direct: true },
      { cfg: { M: 8, N: 8, K: 8 }, sgSize: 16, tilesM: 1, tilesN: 2, sgM: 1, sgN: 2, BK: 16, PAD: 4, direct: false },
      { cfg: { M: 16, N: 8, K: 8 }, sgSize: 8, tilesM: 1, tilesN: 2, sgM: 1, sgN: 1, BK: 8, PAD: 8, direct: true },
    ];
    for (const form of GEMM_FORMS) {
      for (const base of specs) {
        const s: F16TcSpec = { ...base, ...FORM_TRANS[form] };
        expect(f16TcSpecError(s)).toBeNull();
        const r = await checkF16Tc(rt, s, 'f32');
        expect([r.label, r.failed, r.lowRankFailed]).toEqual([r.label, undefined, undefined]);
      }
    }
  });
});

describe('f16 tensor-core GEMM forms aimed at the H100 (emulated matrices): two stages, streamed B tiles, 8-element copies, swizzled grid', () => {
  // Two workgroup buffers (one barrier a K step), B tiles streamed, pairs of vec4s per copy, strips of 2 block rows.
  const all: Omit<F16TcSpec, 'transA' | 'transB'> = {
    cfg: { M: 8, N: 8, K: 8 }, sgSize: 8, tilesM: 1, tilesN: 2, sgM: 2, sgN: 1, BK: 16, PAD: 8, direct: true, stages: 2, loop: 'streamB', copy: 8, swizzle: 2,
  };
  it('passes every device-check case per form, and a grid whose last strip is partial', async () => {
    for (const form of GEMM_FORMS) {
      const s: F16TcSpec = { ...all, ...FORM_TRANS[form] };
      expect(f16TcSpecError(s)).toBeNull();
      const r = await checkF16Tc(rt, s, 'f32');
      expect([r.label, r.failed, r.lowRankFailed]).toEqual([r.label, undefined, undefined]);
      // 3 block rows in strips of 2, 4 block columns, K ending mid-step.
      const c = { M: 2 * 16 + 4, N: 3 * 16 + 4, K: 5 * 16 + 4, ...FORM_TRANS[form] };
      const g = await checkMatmulF16(rt, c, { path: 'f16-tensor-core', spec: s, elem: 'f32' });
      expect([form, g.error, g.bad]).toEqual([form, undefined, 0]);
    }
  });
});

describe('f16 tensor-core GEMM forms of F16-SPEED-PLAN G3-G4 (emulated matrices): two stages unrolled', () => {
  const base: Omit<F16TcSpec, 'transA' | 'transB'> = { cfg: { M: 8, N: 8, K: 8 }, sgSize: 8, tilesM: 1, tilesN: 2, sgM: 2, sgN: 1, BK: 8, PAD: 8, direct: true };
  // Each form once (A and B stored row- and column-major: the literal offsets differ); compiles dominate (~1.5 s each on SwiftShader).
  const cases: [GemmForm, Partial<F16TcSpec>][] = [
    ['NT', { stages: 2, unroll: 2, swizzle: 2 }], ['NN', { stages: 2, unroll: 2, loop: 'streamB' }], ['TN', { stages: 2, unroll: 2 }],
    ['NT', { stages: 2, unroll: 2, copy: 8 }],
  ];
  it('passes every device-check case per form, and K steps odd, even and ending mid-step', async () => {
    for (const [form, f] of cases) {
      const s: F16TcSpec = { ...base, ...f, ...FORM_TRANS[form] };
      expect(f16TcSpecError(s)).toBeNull();
      const r = await checkF16Tc(rt, s, 'f32');
      expect([r.label, r.failed, r.lowRankFailed]).toEqual([r.label, undefined, undefined]);
      // 3 block rows and columns (the last partial); 5 whole K steps (the unrolled loop's break), 6, and 4.5.
      for (const K of [40, 48, 36]) {
        const c = { M: 40, N: 40, K, ...FORM_TRANS[form] };
        const g = await checkMatmulF16(rt, c, { path: 'f16-tensor-core', spec: s, elem: 'f32' });
        expect([form, f, K, g.error, g.bad]).toEqual([form, f, K, undefined, 0]);
      }
    }
  });
});

describe('f16 tensor-core GEMM without prefetch, and one stage with B streamed and 16-byte copies (emulated matrices)', () => {
  const base: Omit<F16TcSpec, 'transA' | 'transB'> = { cfg: { M: 8, N: 8, K: 8 }, sgSize: 8, tilesM: 1, tilesN: 2, sgM: 2, sgN: 1, BK: 16, PAD: 8, direct: true };
  // prefetch false in each form (its fetch moves into the loop), and the one-stage streamB/copy8 structure of NVIDIA's sample.
  const cases: [GemmForm, Partial<F16TcSpec>][] = [
    ['NT', { prefetch: false, swizzle: 2 }], ['NN', { prefetch: false, copy: 8 }], ['TN', { prefetch: false }],
    ['NT', { tilesM: 2, tilesN: 2, sgM: 1, sgN: 2, loop: 'streamB', copy: 8 }],
  ];
  it('passes every device-check case per form, and K steps whole and ending mid-step', async () => {
    for (const [form, f] of cases) {
      const s: F16TcSpec = { ...base, ...f, ...FORM_TRANS[form] };
      expect(f16TcSpecError(s)).toBeNull();
      const r = await checkF16Tc(rt, s, 'f32');
      expect([r.label, r.failed, r.lowRankFailed]).toEqual([r.label, undefined, undefined]);
      // 3 block rows and columns (the last partial); 3 whole K steps and 2.25.
      for (const K of [48, 36]) {
        const c = { M: 40, N: 40, K, ...FORM_TRANS[form] };
        const g = await checkMatmulF16(rt, c, { path: 'f16-tensor-core', spec: s, elem: 'f32' });
        expect([form, f, K, g.error, g.bad]).toEqual([form, f, K, undefined, 0]);
      }
    }
  });
});

describe('f16 tensor-core GEMM on small outputs (the H100 refused a 16-byte C: its direct tile store needs 1024)', () => {
  const direct: F16TcSpec = {
    cfg: { M: 16, N: 16, K: 16 }, sgSize: 32, tilesM: 2, tilesN: 2, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, transA: false, transB: true,
  };
  it('drops the direct store to C where the grid has no whole block, keeps it where it has', () => {
    for (const [M, N] of [[1, 7], [1, 64], [64, 4], [63, 64]]) {
      expect(f16TcSpecForOutput(direct, { M, N }).direct).toBe(false);
      expect(f16TcCode(f16TcSpecForOutput(direct, { M, N }))).not.toContain('(&C');
    }
    expect(f16TcSpecForOutput(direct, { M: 64, N: 64 })).toBe(direct);
    expect(f16TcCode(direct)).toContain('(&C');
  });
  it('the emulated twin matches the reference on 1×7×200 and other thin outputs, each form', async () => {
    const shapes = [[1, 7, 200], [1, 8, 200], [7, 1, 200], [4, 8, 200], [8, 4, 36], [4, 4, 4], [2, 12, 48]];
    const base = { cfg: { M: 8, N: 8, K: 8 }, sgSize: 16, tilesM: 2, tilesN: 1, sgM: 2, sgN: 1, BK: 16, PAD: 4, direct: true };
    let ran = 0;
    for (const form of GEMM_FORMS) {
      const s: F16TcSpec = { ...base, ...FORM_TRANS[form] };
      for (const [M, N, K] of shapes) {
        const v = vec4Operands(form, { M, N, K });
        if (!v.a || !v.b) continue;
        for (const extra of [{}, { alpha: 0.5, accumulate: true }, { accumulate: true }]) {
          const r = await checkMatmulF16(rt, { M, N, K, ...FORM_TRANS[form], ...extra }, { path: 'f16-tensor-core', spec: s, elem: 'f32' });
          expect([form, M, N, K, r.ok, r.error]).toEqual([form, M, N, K, true, undefined]);
          ran++;
        }
      }
    }
    expect(ran).toBeGreaterThanOrEqual(12);
  });
});

describe('f16 GEMM feature detection', () => {
  it.skipIf(hasF16)('without shader-f16 there is no f16 path: callers keep fp32 (this device has shader-f16)', async () => {
    for (const form of GEMM_FORMS) {
      const { transA, transB } = FORM_TRANS[form];
      expect(f16PathFor(rt, transA, transB, { M: 64, N: 64, K: 64 })).toBe('fp32');
    }
    const probe = await enableF16TensorCores(rt);
    expect(probe).toEqual({ present: false, chosen: {}, tried: [], shapeLayouts: {} });
    expect(f16TensorCoreSpec(rt, 'NT')).toBeUndefined();
    expect(f16TensorCoreSpecFor(rt, 'NT', { M: 8192, N: 768, K: 768 })).toBeUndefined();
    const a = uploadF16(rt, 'a', new Float32Array(16));
    const c = rt.createBuffer('workspace', 'c', 64);
    try {
      expect(() => buildMatmulF16(rt, { label: 'nof16', M: 4, N: 4, K: 4, a, b: a, c })).toThrow(/no shader-f16: use the fp32 GEMM/);
      const r = await checkMatmulF16(rt, { M: 4, N: 4, K: 4, transA: false, transB: true });
      expect(r.ok).toBe(false);
      expect(r.error).toMatch(/no shader-f16/);
    } finally {
      rt.mem.free(a);
      rt.mem.free(c);
    }
  });

  it.skipIf(!hasF16)('compiles every SIMT variant (needs shader-f16, which SwiftShader lacks)', async () => {
    for (const form of GEMM_FORMS) {
      for (const [vecA, vecB] of [[true, true], [false, true], [true, false], [false, false]]) {
        expect(await wgslErrors(rt.device, 'simt', simtF16Code({ form, vecA, vecB }), true)).toEqual([]);
      }
      const r = await checkMatmulF16(rt, { M: 65, N: 63, K: 68, ...FORM_TRANS[form] }, { path: 'f16-simt' });
      expect([form, r.error, r.bad]).toEqual([form, undefined, 0]);
    }
  });

  it.skipIf(!hasF16Tc)('compiles the tensor-core layouts and enables a checked one per form (needs shader-f16 and f16 subgroup matrices)', async () => {
    const cfg = f16ConfigsOf(rt.gpu.subgroupMatrixConfigs)[0];
    const errors = await wgslErrors(rt.device, 'tc', f16TcCode({ cfg, ...FORM_TRANS.NT, sgSize: rt.gpu.subgroupMaxSize || 32, ...F16_TC_LAYOUTS[0] }), true);
    expect(errors).toEqual([]);
    const probe = await enableF16TensorCores(rt);
    expect(Object.keys(probe.chosen).sort()).toEqual(['NN', 'NT', 'TN']);
  });
});
