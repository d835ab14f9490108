/**
 * The f16 GEMM's parts that need no GPU: the reference and its tolerance, the path and layout
 * choices, split-K, the generated code's shape, and Dawn's f16 toggle.
 */
import { describe, expect, it } from 'vitest';
import { F16_ON_NVIDIA_TOGGLE, withDawnToggle } from '../../src/engine/gpu/node';
import { matmulRef } from '../../src/engine/kernels/matmul/matmul.ref';
import { compareF16Gemm, f16GemmTolerance, matmulF16Ref, matmulF16RefAt } from '../../src/engine/kernels/matmul-f16/matmul-f16.ref';
import { f16TcCheckCases, f16TcLowRankCheckCases } from '../../src/engine/kernels/matmul-f16/matmul-f16';
import {
  chooseF16SplitK, contiguousDims, F16_TC_LAYOUTS, f16ConfigsOf, f16ShapeKey, MEASURED_F16TC_LAYOUTS, f16KernelFor, f16SplitPlan, f16TcBlockM, f16TcBlockN, f16TcCandidates,
  f16TcLabel, f16TcLayoutOf, f16TcPick, f16TcSpecError, f16TcSpecOfPick, f16TcWorkgroupBytes, FORM_TRANS, formOf, GEMM_FORMS, offeredF16Path, type F16TcSpec, vec4Operands,
} from '../../src/engine/kernels/matmul-f16/plan';
import { simtF16Code } from '../../src/engine/kernels/matmul-f16/simt';
import { f16TcCode } from '../../src/engine/kernels/matmul-f16/tc';
import { roundF16 } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';

const CFG = { M: 16, N: 16, K: 16 };
const spec = (o: Partial<F16TcSpec> = {}): F16TcSpec => ({ cfg: CFG, transA: false, transB: true, sgSize: 32, ...F16_TC_LAYOUTS[0], ...o });
const H100_CONFIGS = [
  { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 },
  { componentType: 'f16', resultComponentType: 'f16', M: 16, N: 16, K: 16 },
  { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 8, K: 8 },
  { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 16, K: 16 },
  { componentType: 'f16', resultComponentType: 'f32', M: 16, N: 8, K: 16 },
];

describe('f16 GEMM reference', () => {
  it('rounds the operands to f16, then multiplies exactly (the fp32 reference on rounded inputs)', () => {
    const rng = new Rng(3);
    for (const form of GEMM_FORMS) {
      const { transA, transB } = FORM_TRANS[form];
      const [M, N, K] = [7, 5, 9];
      const a = rng.uniformArray(M * K);
      const b = rng.uniformArray(K * N);
      const r = matmulF16Ref(a, b, M, N, K, { transA, transB, alpha: 0.5 });
      const want = matmulRef(a.map(roundF16), b.map(roundF16), M, N, K, { transA, transB, alpha: 0.5 });
      expect(Array.from(r.c)).toEqual(Array.from(want));
      // Not the unrounded product.
      const raw = matmulRef(a, b, M, N, K, { transA, transB, alpha: 0.5 });
      expect(Array.from(r.c)).not.toEqual(Array.from(raw));
    }
  });

  it('computes sampled outputs the same as the whole product', () => {
    const rng = new Rng(5);
    for (const form of GEMM_FORMS) {
      const { transA, transB } = FORM_TRANS[form];
      const [M, N, K] = [9, 6, 11];
      const a = rng.uniformArray(M * K);
      const b = rng.uniformArray(K * N);
      const c0 = rng.uniformArray(M * N);
      const o = { transA, transB, alpha: 3, c0 };
      const whole = matmulF16Ref(a, b, M, N, K, o);
      const at = [0, 5, 17, 53, M * N - 1];
      const part = matmulF16RefAt(a, b, M, N, K, at, o);
      expect(Array.from(part.c)).toEqual(at.map((i) => whole.c[i]));
      expect(Array.from(part.absSum)).toEqual(at.map((i) => whole.absSum[i]));
    }
  });

  it('accepts f32 accumulation and rejects f16 accumulation or a wrong layout', () => {
    const rng = new Rng(4);
    const [M, N, K] = [8, 8, 256];
    const a = rng.uniformArray(M * K).map(roundF16);
    const b = rng.uniformArray(K * N).map(roundF16);
    const ref = matmulF16Ref(a, b, M, N, K, { roundedInputs: true });
    const acc = (round: (x: number) => number) => {
      const c = new Float32Array(M * N);
      for (let m = 0; m < M; m++) {
        for (let n = 0; n < N; n++) {
          let s = 0;
          for (let k = 0; k < K; k++) s = round(s + a[m * K + k] * b[k * N + n]);
          c[m * N + n] = s;
        }
      }
      return c;
    };
    expect(compareF16Gemm(acc(Math.fround), ref, K).ok).toBe(true);
    const f16acc = compareF16Gemm(acc(roundF16), ref, K);
    expect(f16acc.ok).toBe(false);
    expect(f16acc.worstRatio).toBeGreaterThan(2);
    // B read transposed by mistake.
    const wrong = matmulF16Ref(a, b, M, N, K, { roundedInputs: true, transB: true });
    expect(compareF16Gemm(Float32Array.from(wrong.c), ref, K).ok).toBe(false);
    const nan = Float32Array.from(ref.c);
    nan[3] = NaN;
    expect(compareF16Gemm(nan, ref, K)).toMatchObject({ ok: false, bad: 1 });
    expect(f16GemmTolerance(0, 10)).toBeGreaterThan(0);
  });
});

describe('f16 GEMM choices', () => {
  it('names the model\'s three forms and their vec4-readable operands', () => {
    expect(formOf(false, true)).toBe('NT');
    expect(formOf(false, false)).toBe('NN');
    expect(formOf(true, false)).toBe('TN');
    expect(formOf(true, true)).toBeNull();
    expect(contiguousDims('NT', { M: 3, N: 5, K: 7 })).toEqual({ a: 7, b: 7 });
    expect(contiguousDims('NN', { M: 3, N: 5, K: 7 })).toEqual({ a: 7, b: 5 });
    expect(contiguousDims('TN', { M: 3, N: 5, K: 7 })).toEqual({ a: 3, b: 5 });
    expect(vec4Operands('TN', { M: 8, N: 6, K: 7 })).toEqual({ a: true, b: false });
    expect(vec4Operands('NT', { M: 1, N: 63, K: 64 })).toEqual({ a: true, b: true });
  });

  it('offers tensor cores, SIMT or fp32 by feature, and picks the kernel per GEMM', () => {
    const caps = { shaderF16: true, subgroupMatrix: true, subgroupMatrixConfigs: H100_CONFIGS };
    expect(offeredF16Path(caps)).toBe('f16-tensor-core');
    expect(offeredF16Path({ ...caps, subgroupMatrix: false })).toBe('f16-simt');
    expect(offeredF16Path({ ...caps, subgroupMatrixConfigs: H100_CONFIGS.slice(0, 2) })).toBe('f16-simt'); // f16→f16 only
    expect(offeredF16Path({ ...caps, shaderF16: false })).toBe('fp32'); // the H100 without Dawn's toggle
    expect(f16ConfigsOf(H100_CONFIGS).map((c) => `${c.M}x${c.N}x${c.K}`)).toEqual(['16x16x16', '16x8x16', '16x8x8']);
    const shape = { M: 8192, N: 768, K: 768 };
    expect(f16KernelFor({ shaderF16: true, tensorCoreForm: true, form: 'NT', shape })).toBe('f16-tensor-core');
    expect(f16KernelFor({ shaderF16: true, tensorCoreForm: false, form: 'NT', shape })).toBe('f16-simt');
    expect(f16KernelFor({ shaderF16: true, tensorCoreForm: true, form: 'NT', shape: { M: 7, N: 7, K: 63 } })).toBe('f16-simt');
    expect(f16KernelFor({ shaderF16: true, tensorCoreForm: true, form: 'TN', shape: { M: 64, N: 64, K: 63 } })).toBe('f16-tensor-core');
    expect(f16KernelFor({ shaderF16: false, tensorCoreForm: true, form: 'NT', shape })).toBe('fp32');
  });

  it('validates layouts: vec4 staging per thread, workgroup memory, BK and PAD, forms', () => {
    for (const l of F16_TC_LAYOUTS) {
      for (const form of GEMM_FORMS) {
        for (const cfg of f16ConfigsOf(H100_CONFIGS)) expect(f16TcSpecError(spec({ ...l, ...FORM_TRANS[form], cfg }))).toBeNull();
      }
    }
    expect(f16TcSpecError(spec({ BK: 24 }))).toMatch(/multiple of 4 and of K/);
    expect(f16TcSpecError(spec({ PAD: 6 }))).toMatch(/PAD/);
    expect(f16TcSpecError(spec({ transA: true, transB: true }))).toMatch(/TT/);
    expect(f16TcSpecError(spec({ tilesM: 8, tilesN: 8, sgM: 4, sgN: 4, BK: 64 }))).toMatch(/workgroup memory/);
    expect(f16TcSpecError(spec(), 16384)).toMatch(/workgroup memory/); // a browser's default 16 KiB
    expect(f16TcSpecError(spec({ sgM: 1, sgN: 1, tilesM: 1, tilesN: 1, BK: 16, sgSize: 128 }))).toMatch(/vec4s per thread/);
    // 128×128 block, BK 32, pad 8: two staged tiles of 128 × 40 f16 and four 16×16 f32 scratch tiles.
    expect(f16TcWorkgroupBytes(spec())).toBe(2 * 128 * 40 * 2 + 4 * 256 * 4);
    expect([f16TcBlockM(spec()), f16TcBlockN(spec())]).toEqual([128, 128]);
  });

  it('measured per-shape layouts are valid specs of their form and configuration', () => {
    expect(f16ShapeKey('TN', { M: 768, N: 2560, K: 8192 })).toBe('768x2560x8192TN');
    for (const t of MEASURED_F16TC_LAYOUTS) {
      for (const [key, e] of Object.entries(t.table)) {
        expect(key).toMatch(/^\d+x\d+x\d+(NT|NN|TN)$/);
        const form = key.slice(-2) as keyof typeof FORM_TRANS;
        expect(f16TcSpecError({ ...spec(FORM_TRANS[form]), cfg: { M: e.cfg[0], N: e.cfg[1], K: e.cfg[2] }, ...e.layout })).toBeNull();
      }
    }
  });

  it('orders candidates: each configuration\'s first valid layout, then the rest', () => {
    const cfgs = f16ConfigsOf(H100_CONFIGS);
    const layouts = F16_TC_LAYOUTS.slice(0, 3);
    const noFirstFor8 = (s: F16TcSpec) => !(s.cfg.N === 8 && s.BK === 32 && s.direct);
    const c = f16TcCandidates('TN', cfgs, layouts, 32, noFirstFor8);
    const key = (s: F16TcSpec) => `${s.cfg.M}x${s.cfg.N}x${s.cfg.K}/BK${s.BK}${s.direct ? 'd' : ''}`;
    expect(c.slice(0, 3).map(key)).toEqual(['16x16x16/BK32d', '16x8x16/BK64d', '16x8x8/BK64d']);
    expect(c.every((s) => s.transA && !s.transB)).toBe(true);
    expect(new Set(c.map(key)).size).toBe(c.length);
    expect(c).toHaveLength(3 + 2 + 1 + 1);
  });

  it('splits K where the grid is thin (dW), not where it is full (forward)', () => {
    const blk = { BM: 128, BN: 128, BK: 32, threads: 128 };
    const dW = { M: 768, N: 768, K: 8192 };
    const ws = 64 * 2 ** 20;
    const S = chooseF16SplitK({ ...dW, ...blk }, ws);
    expect(S).toBeGreaterThan(1);
    expect(chooseF16SplitK({ ...dW, ...blk }, 0)).toBe(1); // no workspace
    expect(chooseF16SplitK({ M: 8192, N: 2560, K: 768, ...blk }, ws)).toBe(1);
    const p = f16SplitPlan(dW, 32, 3);
    expect(p.kChunk % 32).toBe(0);
    expect(p.parts * p.kChunk).toBeGreaterThanOrEqual(8192);
    expect(f16SplitPlan({ M: 4, N: 4, K: 40 }, 32, 4)).toEqual({ kChunk: 32, parts: 2 });
  });

  it('checks each tensor-core spec on partial blocks, whole blocks, alpha with accumulate and split-K', () => {
    for (const form of GEMM_FORMS) {
      const s = spec(FORM_TRANS[form]);
      const cases = f16TcCheckCases(s);
      expect(cases.map((c) => c.name)).toEqual(['partial', 'whole', 'alpha+accumulate', 'whole+accumulate', 'split-K']);
      const odd = cases[0].c;
      // The partial case keeps the vec4 rule of the tensor-core path, and leaves a partial block in M, N and K.
      expect(vec4Operands(form, odd)).toEqual({ a: true, b: true });
      expect(odd.M % 128 && odd.N % 128 && odd.K % s.BK).toBeTruthy();
      expect(cases[1].c.M % 128 || cases[1].c.N % 128).toBe(0);
      // Whole blocks with accumulate take the direct store, the accumulators starting from C's tiles.
      expect([cases[3].c.M % 128 || cases[3].c.N % 128, cases[3].c.accumulate, cases[3].c.alpha]).toEqual([0, true, undefined]);
      // The low-rank cases: the forms LoRA's terms ride in (forward NT with V [N, r], dX NN with V [r, N]); whole blocks on
      // the tensor cores, then ranks past one K pass on partial blocks (NN: N a multiple of 4, the tensor cores; NT: lowRank()).
      const lr = f16TcLowRankCheckCases(s);
      if (form === 'TN') expect(lr).toEqual([]);
      else {
        expect(lr.map((c) => [c.name, c.c.lowRank?.transV, c.c.N % 4 === 0])).toEqual([['whole+lowRank', form === 'NT', true], ['partial+lowRank', form === 'NT', form === 'NN']]);
        expect(lr[1].c.lowRank!.rank).toBeGreaterThan(s.cfg.K);
      }
    }
  });
});

describe('f16 GEMM code', () => {
  it('tensor-core kernel: f16 operands, f32 result tiles, one load per tile and K step, layouts by form', () => {
    const s = spec();
    const code = f16TcCode(s);
    expect(code).toContain('enable f16;');
    expect(code).toContain('alias LT = subgroup_matrix_left<f16, 16, 16>;');
    expect(code).toContain('alias CT = subgroup_matrix_result<f32, 16, 16>;');
    expect(code).toContain('var<storage, read> A: array<vec4<f16>>;');
    const steps = s.BK / CFG.K;
    expect(code.match(/subgroupMatrixMultiplyAccumulate/g)).toHaveLength(s.tilesM * s.tilesN * steps);
    expect(code.match(/subgroupMatrixLoad<LT, row_major>/g)).toHaveLength(s.tilesM * steps); // X [M,K]
    expect(code.match(/subgroupMatrixLoad<RT, col_major>/g)).toHaveLength(s.tilesN * steps); // Wᵀ from W [N,K]
    expect(code).toContain('diagnostic(off, chromium.subgroup_matrix_uniformity)');
    expect(code).not.toMatch(/subgroupMatrixLoad<\w+>\(/); // never the deprecated bool spelling
    const dw = f16TcCode(spec({ transA: true, transB: false }));
    expect(dw.match(/subgroupMatrixLoad<LT, col_major>/g)).toHaveLength(s.tilesM * steps); // dYᵀ from dY [K,M]
    expect(dw.match(/subgroupMatrixLoad<RT, row_major>/g)).toHaveLength(s.tilesN * steps);
    // Prefetch: the next K step's fetch sits between the staging barrier and the multiplies.
    const loop = code.slice(code.indexOf('for (var k0'));
    expect(loop.indexOf('let kv = k0 + 32u')).toBeLessThan(loop.indexOf('subgroupMatrixMultiplyAccumulate'));
    // Direct stores for whole blocks when the layout has them; the scratch path otherwise.
    expect(code.match(/subgroupMatrixStore<row_major>\(&C/g)).toHaveLength(16);
    expect(f16TcCode(spec({ direct: false }))).not.toContain('&C');
    // The emulated twin: the same staging and epilogue, plain functions for the matrix operations, f32 storage.
    const emu = f16TcCode(s, { emulate: true });
    expect(emu).not.toMatch(/subgroupMatrix|enable |<f16|, f16/);
    expect(emu.match(/emuMMA\(/g)).toHaveLength(s.tilesM * s.tilesN * steps + 1); // the calls and the definition
    expect(emu.match(/emuLoadRT_S\([^;]*, true\)/g)).toHaveLength(s.tilesN * steps);
    const one = f16TcCode(spec({ sgM: 1, sgN: 1, tilesM: 4, tilesN: 2, direct: false }));
    expect(one).not.toContain('diagnostic(off');
    expect(one).toContain('let am = 0u;');
  });

  it('forms aimed at the H100: one barrier a K step with two stages, B tiles streamed, 8-element copies, swizzled grid', () => {
    const loopOf = (code: string) => code.slice(code.indexOf('for (var k0'), code.indexOf('let base = wid.z'));
    const barriers = (code: string) => (loopOf(code).match(/workgroupBarrier\(\)/g) ?? []).length;
    expect(barriers(f16TcCode(spec()))).toBe(2);
    const two = f16TcCode(spec({ stages: 2 }));
    expect(barriers(two)).toBe(1);
    expect(two).toContain(`var<workgroup> S: array<f16, ${2 * 2 * 128 * 40}>`);
    expect(f16TcWorkgroupBytes(spec({ stages: 2 }))).toBe(2 * 2 * 128 * 40 * 2 + 4 * 256 * 4);
    // The next step is staged into the other buffer after the multiplies (its global loads were issued before them).
    const loop = loopOf(two);
    expect(loop.indexOf('let nxt')).toBeGreaterThan(loop.lastIndexOf('subgroupMatrixMultiplyAccumulate'));
    expect(loop.indexOf('let kv = k0 + 32u')).toBeLessThan(loop.indexOf('subgroupMatrixMultiplyAccumulate'));
    // streamB: each B tile's load is followed by its tilesM multiplies before the next B tile is loaded.
    const sb = loopOf(f16TcCode(spec({ loop: 'streamB' })));
    expect(sb.indexOf('let b1_0')).toBeGreaterThan(sb.indexOf('c3_0 = subgroupMatrixMultiplyAccumulate(a3_0, b0_0'));
    expect(sb.indexOf('let b1_0')).toBeLessThan(sb.indexOf('c0_1 = subgroupMatrixMultiplyAccumulate'));
    expect(sb.match(/subgroupMatrixMultiplyAccumulate/g)).toHaveLength(16 * 2);
    // copy 8: half the copies per thread, each two vec4s to consecutive staged elements.
    const c8 = f16TcCode(spec({ copy: 8 }));
    expect(c8).toContain('var ra: array<vec4<f16>, 8>;');
    expect(c8).toContain('S[s0 + 7u] = ra[1].w;');
    expect(f16TcSpecError(spec({ copy: 8, PAD: 4 }))).toMatch(/copy=8 needs BK and PAD multiples of 8/);
    const sw = f16TcCode(spec({ swizzle: 8 }));
    expect(sw).toContain('@builtin(num_workgroups) nwg');
    expect(sw).toContain('let strip = pid / (8u * nwg.x);');
    expect(f16TcCode(spec())).not.toContain('num_workgroups');
    // Labels: the first layouts' as before (records name them), the new forms' marked.
    expect(f16TcLabel(spec())).toBe('f16 NT 16x16x16 128x128 (2x2 sg of 4x4) BK32 pad8 direct');
    expect(f16TcLabel(spec({ stages: 2, loop: 'streamB', copy: 8, swizzle: 8 }))).toBe('f16 NT 16x16x16 128x128 (2x2 sg of 4x4) BK32 pad8 direct 2stage streamB copy8 swz8');
    expect(f16TcLayoutOf(spec({ stages: 1, copy: 4, swizzle: 1 }))).toEqual(F16_TC_LAYOUTS[0]);
    expect(f16TcSpecError(spec({ stages: 3 as 2 }))).toMatch(/stages/);
  });

  it('F16-SPEED-PLAN forms: two stages unrolled with literal offsets', () => {
    const loopOf = (code: string) => code.slice(code.indexOf('for (var k0'), code.indexOf('let base = wid.z'));
    // unroll 2: two bodies, one per buffer, matrix loads at a per-subgroup base plus a literal; no `cur`.
    const un = f16TcCode(spec({ stages: 2, unroll: 2 }));
    const ul = loopOf(un);
    expect(ul).not.toContain('cur');
    expect(ul).toContain('k0 += 64u');
    expect(ul.match(/workgroupBarrier\(\)/g)).toHaveLength(2);
    expect(ul).toContain('subgroupMatrixLoad<LT, row_major>(&S, aB + 0u, 40u)');
    expect(ul).toContain(`subgroupMatrixLoad<LT, row_major>(&S, aB + ${2 * 128 * 40}u, 40u)`); // buffer 1, tile 0
    expect(ul).toContain('if (!more) { break; }');
    expect(un).toContain('let aB = am * 40u;');
    expect(f16TcCode(spec())).not.toContain('aB');
    // Labels, picks and layout fields name the option; the old layouts' are unchanged.
    const all = spec({ stages: 2, unroll: 2, swizzle: 8 });
    expect(f16TcLabel(all)).toBe('f16 NT 16x16x16 128x128 (2x2 sg of 4x4) BK32 pad8 direct 2stage swz8 unroll2');
    expect(f16TcLayoutOf(all)).toEqual({ ...F16_TC_LAYOUTS[0], stages: 2, unroll: 2, swizzle: 8 });
    expect(f16TcLayoutOf(spec({ unroll: 1 }))).toEqual(F16_TC_LAYOUTS[0]);
    // Illegal combinations are refused with what to change.
    expect(f16TcSpecError(spec({ unroll: 2 }))).toMatch(/unroll=2 .* needs stages=2/);
    expect(f16TcSpecError(spec({ stages: 2, unroll: 3 as 2 }))).toMatch(/unroll=3/);
    // Tuned picks naming the removed options (stageVia 'sgmat' .sg, load16 .w16; slower on the H100, s27c1) parse to null: the cache ignores them.
    expect([f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk32.p8.d.s2.z8.u2', 32), f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk32.p8.d.s2.z8.u2.sg', 32),
      f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk32.p8.d.c8.z8.w16', 32)].map((x) => x && f16TcLabel(x))).toEqual(['f16 NT 16x16x16 128x128 (2x2 sg of 4x4) BK32 pad8 direct 2stage swz8 unroll2', null, null]);
  });

  it('without prefetch: each step fetched right before it is staged, no fetch between the barrier and the multiplies', () => {
    const loopOf = (code: string) => code.slice(code.indexOf('for (var k0'), code.indexOf('let base = wid.z'));
    const np = spec({ prefetch: false, swizzle: 8 });
    const code = f16TcCode(np);
    const loop = loopOf(code);
    // No fetch before the loop; in it: fetch (kv = k0), stage, barrier, multiplies, barrier.
    expect(code.slice(0, code.indexOf('for (var k0'))).not.toContain('let kv');
    expect(loop).toContain('let kv = k0;');
    expect(loop).not.toContain('let kv = k0 + 32u');
    expect(loop.indexOf('let kv = k0;')).toBeLessThan(loop.indexOf('S[s0] = ra[0].x'));
    expect(loop.indexOf('workgroupBarrier()')).toBeLessThan(loop.indexOf('subgroupMatrixMultiplyAccumulate'));
    expect(loop.match(/workgroupBarrier\(\)/g)).toHaveLength(2);
    expect(loop.match(/subgroupMatrixMultiplyAccumulate/g)).toHaveLength(16 * 2);
    expect(code).toContain(', no prefetch.');
    // Label, pick and layout fields name it; two stages (which stage the prefetched step) refuse it.
    expect(f16TcLabel(np)).toBe('f16 NT 16x16x16 128x128 (2x2 sg of 4x4) BK32 pad8 direct swz8 nopf');
    expect(f16TcPick(np)).toBe('NT.16x16x16.4x4.2x2.bk32.p8.d.z8.np');
    expect(f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk32.p8.d.z8.np', 32)).toEqual(np);
    expect(f16TcLayoutOf(np)).toEqual({ ...F16_TC_LAYOUTS[0], swizzle: 8, prefetch: false });
    expect(f16TcLayoutOf(spec({ prefetch: true }))).toEqual(F16_TC_LAYOUTS[0]);
    expect(f16TcCode(spec({ prefetch: true }))).toBe(f16TcCode(spec()));
    expect(f16TcSpecError(spec({ prefetch: false, stages: 2 }))).toMatch(/prefetch=false .* needs stages=1/);
    // The new rows are selectable by the bench's --layouts REGEX given in bench/README.md.
    const re = /nopf$|\(2x4 sg of 4x4\) BK(16|32) pad8 direct streamB copy8|\(2x4 sg of 8x2\)|sg of 4x8\)/;
    const picked = F16_TC_LAYOUTS.filter((l) => re.test(f16TcLabel(spec(l))));
    expect(picked).toEqual(F16_TC_LAYOUTS.slice(-7));
  });

  it('SIMT kernel: vec4<f16> loads where rows are whole vec4s, scalar loads otherwise, f32 accumulation', () => {
    const v = simtF16Code({ form: 'NT', vecA: true, vecB: true });
    expect(v).toContain('enable f16;');
    expect(v).toContain('var<storage, read> A: array<vec4<f16>>;');
    expect(v).toContain('var<workgroup> As: array<f32');
    expect(v).toContain('fma(a[i], b[j], acc[i][j])');
    const s = simtF16Code({ form: 'TN', vecA: false, vecB: true });
    expect(s).toContain('var<storage, read> A: array<f16>;');
    expect(s).toContain('var<storage, read> B: array<vec4<f16>>;');
    const twin = simtF16Code({ form: 'NN', vecA: true, vecB: true, elem: 'f32' });
    expect(twin).not.toContain('f16;');
    expect(twin).not.toMatch(/<f16>|array<f16/);
  });
});

describe('Dawn toggles', () => {
  it('adds vulkan_enable_f16_on_nvidia beside allow_unsafe_apis, once', () => {
    expect(withDawnToggle([], 'enable-dawn-features', F16_ON_NVIDIA_TOGGLE)).toEqual(['enable-dawn-features=vulkan_enable_f16_on_nvidia']);
    expect(withDawnToggle(['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'], 'enable-dawn-features', F16_ON_NVIDIA_TOGGLE))
      .toEqual(['enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia', 'disable-dawn-features=timestamp_quantization']);
    const twice = ['enable-dawn-features=allow_unsafe_apis,vulkan_enable_f16_on_nvidia'];
    expect(withDawnToggle(twice, 'enable-dawn-features', F16_ON_NVIDIA_TOGGLE)).toBe(twice);
    expect(withDawnToggle(['enable-dawn-features=a'], 'disable-dawn-features', 'b')).toEqual(['enable-dawn-features=a', 'disable-dawn-features=b']);
  });
});
