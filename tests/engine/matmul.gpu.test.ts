/**
 * GEMM vs matmulRef. SwiftShader compiles each GEMM pipeline in seconds, so the combinatorial cases
 * run through one "dynamic" pipeline (transposes and accumulate read from the uniform block) per
 * access width, and the specialized pipelines the model uses are checked on fewer cases. Every
 * variant's tile arithmetic is covered by matmul.variants.gpu.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { profileDispatches, timeDispatches, timeSequence, warmUntilSteady } from '../../src/engine/gpu/timer';
import { buildMatmul, matmul, matmulSteps } from '../../src/engine/kernels/matmul/matmul';
import { chooseMatmulVariant, measuredVariant, setTunedVariant } from '../../src/engine/kernels/matmul/choice';
import { type MatmulShape, matmulWorkspaceBytes, shapeKey } from '../../src/engine/kernels/matmul/plan';
import { getVariant, variantFits } from '../../src/engine/kernels/matmul/variants';
import { MEASURED_TABLES, type MeasuredTable } from '../../src/engine/kernels/matmul/tables';
import { checkMatmuls, type MatmulCase, TRANS } from './matmul.cases';
import { matmulRef } from '../../src/engine/kernels/matmul/matmul.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';

const SMALL = '32x32k16_4x4';

describe('matmul vs reference', () => {
  it('all transposes × accumulate × alpha; sizes 1, 7, 63, 65, 129, K not a multiple of BK (scalar access)', async () => {
    // No dimension is a multiple of 4, so every operand takes the scalar path: one pipeline.
    const shapes: [number, number, number][] = [[1, 1, 1], [7, 5, 3], [65, 63, 129], [129, 65, 7], [63, 1, 65], [1, 65, 63], [33, 97, 18]];
    const cases: MatmulCase[] = [];
    for (const [M, N, K] of shapes) {
      for (const [transA, transB] of TRANS) {
        for (const [accumulate, alpha] of [[false, 1], [true, -0.75], [false, 0.5], [true, 1]] as const) {
          cases.push({ M, N, K, transA, transB, accumulate, alpha, variant: SMALL, specialize: false });
        }
      }
    }
    await checkMatmuls(await testRuntime(), cases);
  });

  it('all transposes × accumulate with every dimension a multiple of 4 (vec4 access)', async () => {
    const shapes: [number, number, number][] = [[4, 4, 4], [36, 68, 44], [100, 36, 20]];
    const cases: MatmulCase[] = [];
    for (const [M, N, K] of shapes) {
      for (const [transA, transB] of TRANS) {
        for (const accumulate of [false, true]) {
          cases.push({ M, N, K, transA, transB, accumulate, alpha: accumulate ? 2 : 1, variant: SMALL, specialize: false });
        }
      }
    }
    await checkMatmuls(await testRuntime(), cases);
  });

  it('specialized pipelines (what the model runs): Y = X·Wᵀ and dW += dYᵀ·X forms', async () => {
    // NT and TN between them use all four tile-load paths (k-major and k-minor, A and B).
    await checkMatmuls(await testRuntime(), [
      { M: 37, N: 44, K: 52, transB: true, variant: SMALL },
      { M: 12, N: 44, K: 52, transB: true, variant: SMALL, alpha: 0.25 },
      { M: 65, N: 40, K: 35, transA: true, accumulate: true, variant: SMALL },
    ]);
  });

  it('a dispatch built once accumulates again on every run', async () => {
    const rt = await testRuntime();
    const [M, N, K] = [5, 6, 7];
    const a = new Rng(7).uniformArray(M * K);
    const b = new Rng(8).uniformArray(K * N);
    const A = rt.upload('workspace', 'a', a);
    const B = rt.upload('workspace', 'b', b);
    const C = rt.upload('workspace', 'c', new Float32Array(M * N));
    const d = matmul(rt, { label: 'thrice', a: A, b: B, c: C, M, N, K, accumulate: true, variant: SMALL, specialize: false });
    rt.run([d, d]);
    rt.run([d]);
    expectClose(await rt.readF32(C, 0, M * N), matmulRef(a, b, M, N, K, { alpha: 3 }), { atol: 1e-5, rtol: 1e-5, label: '3 runs' });
    [A, B, C].forEach((x) => rt.mem.free(x));
  });

  it('rejects bad shapes, short bindings and unknown variants', async () => {
    const rt = await testRuntime();
    const buf = rt.createBuffer('workspace', 'small', 64);
    const args = { label: 'bad', a: buf, b: buf, c: buf };
    expect(() => matmul(rt, { ...args, M: 1, N: 1, K: 0 })).toThrow(/K must be/);
    expect(() => matmul(rt, { ...args, M: 2.5, N: 1, K: 1 })).toThrow(/M must be/);
    expect(() => matmul(rt, { ...args, M: 5, N: 5, K: 5 })).toThrow(/binding a has 64 bytes, needs 100/);
    expect(() => matmul(rt, { ...args, M: 1, N: 1, K: 1, variant: 'nope' })).toThrow(/unknown variant/);
    rt.mem.free(buf);
  });
});

describe('whole tiles, split-K and launch order', () => {
  it('FULL_TILES (no bounds checks) where the tile divides the shape: every transpose, accumulate', async () => {
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      cases.push({ M: 64, N: 32, K: 48, transA, transB, accumulate: transA, alpha: 0.5, variant: SMALL, specialize: false });
    }
    cases.push({ M: 32, N: 96, K: 32, transB: true, variant: SMALL }); // the specialized Y = X·Wᵀ pipeline
    const ran = await checkMatmuls(await testRuntime(), cases);
    expect(ran.every((r) => r.fullTiles)).toBe(true);
    // One dimension off the tile grid (or not a vec4 multiple) turns the checks back on.
    const partial = await checkMatmuls(await testRuntime(), [
      { M: 64, N: 36, K: 48, variant: SMALL, specialize: false },
      { M: 64, N: 32, K: 50, variant: SMALL, specialize: false },
    ]);
    expect(partial.map((r) => r.fullTiles)).toEqual([false, false]);
  });

  it('split-K: every transpose, uneven K slices, alpha and accumulate applied once in the reduction', async () => {
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      // K = 200: 13 BK tiles in 4 slices of 4,4,4,1; M, N partial tiles.
      cases.push({ M: 37, N: 45, K: 200, transA, transB, accumulate: true, alpha: -0.75, variant: `${SMALL}_sk4`, specialize: false });
      cases.push({ M: 64, N: 32, K: 256, transA, transB, variant: `${SMALL}_sk8`, specialize: false });
    }
    cases.push({ M: 48, N: 40, K: 300, transA: true, accumulate: true, variant: `${SMALL}_sk2` }); // specialized dW form
    const ran = await checkMatmuls(await testRuntime(), cases);
    expect(ran.map((r) => r.variant)).toEqual(cases.map((c) => c.variant));
  });

  it('stream-K: whole tiles, then the last wave shared out and its tiles summed in k order; every transpose, partial tiles, alpha and accumulate once', async () => {
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      // 12 tiles of 32×32 (partial at the edges), 13 k steps: 10 whole tiles, then 2 tiles over 5 workgroups.
      cases.push({ M: 100, N: 70, K: 200, transA, transB, accumulate: true, alpha: -0.75, variant: `${SMALL}_st5`, specialize: false });
      // Fewer tiles than workgroups: 4 tiles of 19 k steps over 7 workgroups, each within one or two tiles.
      cases.push({ M: 64, N: 64, K: 300, transA, transB, variant: `${SMALL}_st7`, specialize: false });
    }
    cases.push({ M: 48, N: 40, K: 300, transA: true, accumulate: true, variant: `${SMALL}_st3` }); // specialized dW form
    // More workgroups than k steps: one tile of 2 k steps, one step each for 2 of the 5.
    cases.push({ M: 20, N: 30, K: 20, variant: `${SMALL}_st5`, specialize: false });
    // The model's tile (8×16, next buffer by modulo, k steps written out): 3 whole tiles, then one of 8 k steps over 3 workgroups.
    cases.push({ M: 256, N: 256, K: 64, variant: '128x128k8_8x16_st3' });
    // A multiple of W tiles: nothing shared, the plain GEMM runs (one dispatch, no workspace).
    cases.push({ M: 64, N: 64, K: 64, variant: `${SMALL}_st4`, specialize: false });
    const rt = await testRuntime();
    const ran = await checkMatmuls(rt, cases);
    expect(ran.map((r) => r.variant)).toEqual([...cases.slice(0, -1).map((c) => c.variant), SMALL]);
    expect(matmulWorkspaceBytes(cases[cases.length - 1], `${SMALL}_st4`)).toBe(0);
    const a = rt.createBuffer('workspace', 'a', 4 * 100 * 200);
    const b = rt.createBuffer('workspace', 'b', 4 * 200 * 70);
    const c = rt.createBuffer('workspace', 'c', 4 * 100 * 70);
    const args = { label: 'stream-K', a, b, c, M: 100, N: 70, K: 200 };
    expect(() => buildMatmul(rt, { ...args, variant: `${SMALL}_st5` })).toThrow(/needs a workspace of 40960 bytes, have 0/);
    const ws = rt.createBuffer('workspace', 'ws', 40960);
    const built = buildMatmul(rt, { ...args, variant: `${SMALL}_st5`, workspace: ws });
    expect(built.dispatches.map((d) => d.workgroups)).toEqual([[3, 6, 1], [1, 2, 1]]); // 10 whole tiles, then 6 parts: 5 first parts, one second
    [a, b, c, ws, ...built.uniforms].forEach((x) => rt.mem.free(x));
  });

  it('accumulating with alpha 1 (the model\'s residual adds): vec4 and scalar, whole and partial tiles, the model\'s 8x16 tiles, stream-K parts', async () => {
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      cases.push({ M: 64, N: 32, K: 48, transA, transB, accumulate: true, variant: SMALL, specialize: false }); // FULL_TILES, vec4
      cases.push({ M: 37, N: 45, K: 50, transA, transB, accumulate: true, variant: SMALL, specialize: false }); // partial, scalar
    }
    cases.push({ M: 256, N: 256, K: 64, accumulate: true, variant: '128x128k8_8x16' }); // the model's tile, specialized
    cases.push({ M: 200, N: 136, K: 72, accumulate: true, variant: '128x128k8_8x16_ia' }); // partial 8x16 tiles, LEAN
    // Stream-K: whole-tile parts add C in their epilogue, shared tiles' parts write raw slots and the fixup adds C once.
    cases.push({ M: 256, N: 256, K: 64, accumulate: true, variant: '128x128k8_8x16_st3' });
    cases.push({ M: 100, N: 70, K: 200, accumulate: true, variant: `${SMALL}_st5`, specialize: false });
    const ran = await checkMatmuls(await testRuntime(), cases);
    expect(ran.map((r) => r.variant)).toEqual(cases.map((c) => c.variant));
  });

  it('LEAN (_ia) choices give the same bits as their twins: whole and partial tiles, every transpose, accumulate, split-K and stream-K', async () => {
    // The LEAN text changes how the loads are addressed, not the arithmetic: the same FMAs in the
    // same order, so the outputs must be equal bit for bit (and right: checked against the reference).
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      cases.push({ M: 128, N: 64, K: 48, transA, transB, accumulate: transA, alpha: 0.5, variant: '64x64k16_8x8_ia', specialize: false }); // FULL_TILES
      cases.push({ M: 70, N: 50, K: 40, transA, transB, accumulate: !transA, variant: '64x64k16_8x8_ia', specialize: false }); // partial tiles
    }
    cases.push({ M: 128, N: 64, K: 160, transA: true, accumulate: true, variant: '64x64k16_8x8_ia_sk3', specialize: false });
    cases.push({ M: 256, N: 256, K: 64, variant: '128x128k8_8x16_ia' }); // the model's tile, specialized, next buffer by modulo
    cases.push({ M: 256, N: 256, K: 64, variant: '128x128k8_8x16_ia_st3' }); // 3 whole tiles, then one over 3 workgroups
    const rt = await testRuntime();
    const ran = await checkMatmuls(rt, cases);
    expect(ran.map((r) => r.fullTiles)).toEqual(cases.map((c) => c.M % 64 === 0 && c.N % 64 === 0));
    const rng = new Rng(77);
    for (const c of cases) {
      const twin = c.variant!.replace('_ia', '');
      const bufs = [c.M * c.K, c.K * c.N, c.M * c.N].map((n, i) => rt.upload('workspace', `lean.${i}`, rng.uniformArray(n)));
      const c0 = await rt.readF32(bufs[2], 0, c.M * c.N);
      const ws = rt.createBuffer('workspace', 'lean.ws', Math.max(16, matmulWorkspaceBytes(c, c.variant!)));
      const out: Float32Array[] = [];
      for (const variant of [c.variant!, twin]) {
        rt.device.queue.writeBuffer(bufs[2], 0, c0);
        const built = buildMatmul(rt, { label: `lean ${variant}`, ...c, a: bufs[0], b: bufs[1], c: bufs[2], workspace: ws, variant });
        rt.run(built.dispatches);
        out.push(await rt.readF32(bufs[2], 0, c.M * c.N));
        built.uniforms.forEach((u) => rt.mem.free(u));
      }
      expect(Buffer.from(out[0].buffer).equals(Buffer.from(out[1].buffer)), `${c.variant} vs ${twin}`).toBe(true);
      [...bufs, ws].forEach((x) => rt.mem.free(x));
    }
  });

  it('split-K asks for no more slices than K has tiles, and checks its workspace', async () => {
    const rt = await testRuntime();
    const [M, N, K] = [8, 8, 20]; // two BK=16 tiles: _sk8 becomes 2 slices
    expect(matmulWorkspaceBytes({ M, N, K }, `${SMALL}_sk8`)).toBe(2 * M * N * 4);
    await checkMatmuls(rt, [{ M, N, K, variant: `${SMALL}_sk8`, specialize: false }]);
    const a = rt.createBuffer('workspace', 'a', 4 * M * K);
    const b = rt.createBuffer('workspace', 'b', 4 * K * N);
    const c = rt.createBuffer('workspace', 'c', 4 * M * N);
    const small = rt.createBuffer('workspace', 'ws', 4 * M * N);
    const args = { label: 'split', a, b, c, M, N, K };
    expect(() => buildMatmul(rt, { ...args, variant: `${SMALL}_sk2` })).toThrow(/needs a workspace of 512 bytes, have 0/);
    expect(() => buildMatmul(rt, { ...args, variant: `${SMALL}_sk2`, workspace: small })).toThrow(/have 256/);
    expect(() => buildMatmul(rt, { ...args, variant: `${SMALL}_sk2`, workspace: c })).toThrow(/different buffer from c/);
    expect(() => buildMatmul(rt, { ...args, variant: `${SMALL}_sk99` })).toThrow(/split-K/);
    // A tuned split choice used without a workspace falls back to one pass; matmul() never splits.
    setTunedVariant(rt, args, `${SMALL}_sk2`);
    const fallback = buildMatmul(rt, { ...args, specialize: false });
    expect(fallback.variant).not.toMatch(/_sk/);
    expect(fallback.dispatches).toHaveLength(1);
    const ws = rt.createBuffer('workspace', 'ws2', 4 * 2 * M * N);
    const split = buildMatmul(rt, { ...args, workspace: ws, specialize: false });
    expect(split.variant).toBe(`${SMALL}_sk2`);
    expect(split.dispatches).toHaveLength(2);
    expect(matmulSteps(rt, { ...args, workspace: ws, specialize: false })).toHaveLength(2);
    [a, b, c, small, ws, ...fallback.uniforms, ...split.uniforms].forEach((x) => rt.mem.free(x));
  });

  it('swizzled launch order covers every tile once, the last group of tile rows shorter', async () => {
    const v = getVariant('128x128k8_8x8_sw8');
    const rt = await testRuntime();
    if (!variantFits(v, rt.device.limits)) return;
    // 10 tile rows (groups of 8 and 2) × 3 tile columns, every edge partial.
    await checkMatmuls(rt, [{ M: 9 * 128 + 5, N: 2 * 128 + 1, K: 24, variant: v.name, specialize: false }]);
  });
});

describe('autotune and timer', () => {
  const shape: MatmulShape = { M: 37, N: 44, K: 52, transB: true };

  it('a measured table for this GPU model is used when nothing was tuned here; stale names are passed over', async () => {
    const rt = await testRuntime();
    const info = rt.gpu.adapterInfo;
    const [s1, s2, s3, s4] = [{ M: 9, N: 10, K: 11 }, { M: 9, N: 10, K: 12 }, { M: 9, N: 10, K: 13 }, { M: 9, N: 10, K: 64 }];
    const buf = rt.createBuffer('workspace', 'x', 4 * 64 * 10);
    const table: MeasuredTable = {
      match: { vendor: info.vendor.toUpperCase(), architecture: info.architecture }, source: 'test',
      table: { [shapeKey(s1)]: '64x64k16_4x4', [shapeKey(s2)]: 'renamed-variant', [shapeKey(s3)]: `${SMALL}_sk2`, [shapeKey(s4)]: `${SMALL}_sk2` },
      ranked: { [shapeKey(s4)]: [`${SMALL}_sk2`, '64x64k16_4x4'] },
    };
    MEASURED_TABLES.push(table);
    try {
      const pick = (s: MatmulShape) => {
        const b = buildMatmul(rt, { label: 'measured', ...s, a: buf, b: buf, c: buf, specialize: false });
        b.uniforms.forEach((u) => rt.mem.free(u));
        return b.variant;
      };
      expect(measuredVariant(rt, s1)).toBe('64x64k16_4x4');
      expect(pick(s1)).toBe('64x64k16_4x4');
      expect(pick(s2)).toBe(chooseMatmulVariant(s2, rt.device.limits));
      expect(pick(s3)).not.toMatch(/_sk/); // no workspace given
      expect(pick(s4)).toBe('64x64k16_4x4'); // the fastest ranked choice that needs no workspace
      expect(measuredVariant(rt, s4)).toBe(`${SMALL}_sk2`); // with any workspace: the best
      expect(measuredVariant(rt, s4, (c) => !c.includes('_sk'))).toBe('64x64k16_4x4');
      table.match.architecture = 'another-gpu';
      expect(measuredVariant(rt, s1)).toBeUndefined();
    } finally {
      MEASURED_TABLES.splice(MEASURED_TABLES.indexOf(table), 1);
      rt.mem.free(buf);
    }
  });

  it('timeDispatches gives positive per-rep samples with timestamps and with the wall clock', async () => {
    const rt = await testRuntime();
    const a = rt.createBuffer('workspace', 'ta', 4 * 37 * 52);
    const b = rt.createBuffer('workspace', 'tb', 4 * 52 * 44);
    const c = rt.createBuffer('workspace', 'tc', 4 * 37 * 44);
    const { dispatches: [dispatch], uniforms } = buildMatmul(rt, { label: 'timed', ...shape, a, b, c, variant: SMALL });
    rt.device.pushErrorScope('validation');
    const methods = new Set<string>();
    for (const forceWallclock of [false, true]) {
      const r = await timeDispatches(rt, [dispatch, dispatch], { warmup: 1, reps: 3, forceWallclock });
      expect(r.samplesMs).toHaveLength(3);
      expect(r.samplesMs.every((s) => s > 0)).toBe(true);
      expect(r.medianMs).toBeGreaterThan(0);
      methods.add(r.method);
    }
    expect(await rt.device.popErrorScope()).toBeNull();
    expect(methods.has('wallclock')).toBe(true);
    if (rt.gpu.features.timestampQuery) console.log(`timestamp-query present; methods used: ${[...methods].join(', ')}`);
    [a, b, c, ...uniforms].forEach((x) => rt.mem.free(x));
  });

  it('warmUntilSteady runs batches until the per-run time settles, within its time bounds', async () => {
    const rt = await testRuntime();
    const bufs = [0, 1, 2].map((i) => rt.createBuffer('workspace', `w${i}`, 4 * 32 * 32));
    const built = buildMatmul(rt, { label: 'warm', M: 32, N: 32, K: 32, a: bufs[0], b: bufs[1], c: bufs[2], variant: SMALL });
    const w = await warmUntilSteady(rt, built.dispatches, 60, 2000);
    expect(w.ms).toBeGreaterThanOrEqual(60);
    expect(w.ms).toBeLessThan(2000 + 1000); // one batch may run past the cap
    expect(w.batchMsPerRun.length).toBeGreaterThanOrEqual(3);
    expect(w.runs).toBeGreaterThanOrEqual(w.batchMsPerRun.length);
    expect(w.batchMsPerRun.every((t) => t > 0)).toBe(true);
    const capped = await warmUntilSteady(rt, built.dispatches, 10_000, 100); // minMs above the cap: the cap wins
    expect(capped.ms).toBeLessThan(100 + 1000);
    [...bufs, ...built.uniforms].forEach((x) => rt.mem.free(x));
  });

  it('timeSequence times each item of a sequence (its median of reps), in order; a bigger GEMM takes longer', async () => {
    const rt = await testRuntime();
    const bufs = [0, 1, 2].map((i) => rt.createBuffer('workspace', `s${i}`, 4 * 192 * 192));
    const [a, b, c] = bufs;
    const small = buildMatmul(rt, { label: 's.small', M: 8, N: 8, K: 8, a, b, c, variant: SMALL });
    const big = buildMatmul(rt, { label: 's.big', M: 192, N: 192, K: 192, a, b, c, variant: SMALL });
    rt.device.pushErrorScope('validation');
    const ms = await timeSequence(rt, [
      { dispatches: small.dispatches, warmup: 1, reps: 3 }, { dispatches: big.dispatches, warmup: 1, reps: 3 }, { dispatches: small.dispatches },
    ]);
    expect(await rt.device.popErrorScope()).toBeNull();
    expect(ms).toHaveLength(3);
    expect(ms.every((x) => x > 0)).toBe(true);
    expect(ms[1]).toBeGreaterThan(ms[0]);
    expect(ms[1]).toBeGreaterThan(ms[2]);
    [...bufs, ...small.uniforms, ...big.uniforms].forEach((x) => rt.mem.free(x));
  });

  it('profileDispatches times each dispatch on its own; a bigger GEMM takes longer, an empty grid 0', async () => {
    const rt = await testRuntime();
    const bufs = [4 * 192 * 192, 4 * 192 * 192, 4 * 192 * 192].map((n, i) => rt.createBuffer('workspace', `p${i}`, n));
    const [a, b, c] = bufs;
    const small = buildMatmul(rt, { label: 'p.small', M: 8, N: 8, K: 8, a, b, c, variant: SMALL });
    const big = buildMatmul(rt, { label: 'p.big', M: 192, N: 192, K: 192, a, b, c, variant: SMALL });
    const empty = { ...small.dispatches[0], workgroups: [0, 1, 1] as [number, number, number] };
    const ms = await profileDispatches(rt, [small.dispatches[0], big.dispatches[0], empty], 3);
    if (!rt.gpu.features.timestampQuery) {
      expect(ms).toBeNull();
    } else {
      expect(ms).toHaveLength(3);
      expect(ms![0]).toBeGreaterThan(0);
      expect(ms![1]).toBeGreaterThan(ms![0]);
      expect(ms![2]).toBe(0);
    }
    [...bufs, ...small.uniforms, ...big.uniforms].forEach((x) => rt.mem.free(x));
  });
});
