/**
 * Several split-K GEMMs' partials summed by one dispatch (matmul.ts deferReduce + splitKReduceSegments:
 * LoRA's dA/dB reduce once a layer): each C bit for bit the GEMM with its own reduce (the same slices
 * summed in the same order), Cs and partials at offsets of shared buffers; one-pass choices write C
 * themselves; bad segments are refused.
 */
import { describe, expect, it } from 'vitest';
import { buildMatmul, matmulSteps, splitKReduceSegments, MAX_SPLIT_K_SEGMENTS, type SplitKSegment } from '../../src/engine/kernels/matmul/matmul';
import { matmulWorkspaceBytes } from '../../src/engine/kernels/matmul/plan';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('split-K reduce over segments', () => {
  it('equals each GEMM with its own reduce, bit for bit', async () => {
    const rt = await testRuntime();
    const rng = new Rng(11);
    // dB's form (tA tB, K long), dA's (NN), a 1-slice pick among them, alpha as LoRA's scale.
    const cases = [
      { M: 36, N: 8, K: 96, transA: true, transB: true, variant: '32x32k16_4x4_sk6' },
      { M: 24, N: 40, K: 96, variant: '32x32k16_4x4_sk3' },
      { M: 20, N: 12, K: 32, variant: '32x32k16_4x4' },
      { M: 16, N: 64, K: 128, transA: true, variant: '64x64k16_4x4_sk8' },
    ];
    const alpha = 1.75;
    // Cs and partials at 64-float steps, as the LoRA layout's tensors.
    const at = (n: number) => Math.ceil(n / 64) * 64;
    const cAt: number[] = [];
    const wsAt: number[] = [];
    let [cEnd, wsEnd] = [64, 128];
    for (const c of cases) {
      cAt.push(cEnd);
      wsAt.push(wsEnd);
      cEnd += at(c.M * c.N);
      wsEnd += at(matmulWorkspaceBytes(c, c.variant) / 4);
    }
    const C = rt.createBuffer('workspace', 'seg.c', cEnd * 4);
    const W = rt.createBuffer('workspace', 'seg.ws', wsEnd * 4);
    const own = cases.map((c) => rt.createBuffer('workspace', 'own.c', c.M * c.N * 4));
    const ownWs = rt.createBuffer('workspace', 'own.ws', Math.max(...cases.map((c) => matmulWorkspaceBytes(c, c.variant))) || 4);
    const ab = cases.map((c) => [rt.upload('workspace', 'seg.a', rng.uniformArray(c.M * c.K)), rt.upload('workspace', 'seg.b', rng.uniformArray(c.K * c.N))]);
    const segments: SplitKSegment[] = [];
    const steps = [];
    for (const [i, c] of cases.entries()) {
      const ws = matmulWorkspaceBytes(c, c.variant);
      const m = buildMatmul(rt, {
        label: 'seg', ...c, a: ab[i][0], b: ab[i][1], c: { buffer: C, offset: cAt[i] * 4, size: c.M * c.N * 4 }, alpha, deferReduce: true,
        workspace: ws ? { buffer: W, offset: wsAt[i] * 4, size: ws } : undefined,
      });
      expect(m.variant).toBe(c.variant);
      // The partials' GEMM only: its reduce is the segments'.
      expect(m.dispatches).toHaveLength(1);
      if (m.parts > 1) segments.push({ c: cAt[i], size: c.M * c.N, parts: m.parts, ws: wsAt[i] });
      steps.push(...m.dispatches);
      // Each on its own: the GEMM and its reduce.
      steps.push(...matmulSteps(rt, { label: 'own', ...c, a: ab[i][0], b: ab[i][1], c: own[i], alpha, workspace: ws ? { buffer: ownWs, offset: 0, size: ws } : undefined }));
    }
    expect(segments.map((g) => g.parts)).toEqual([6, 3, 8]);
    // The own GEMMs share one workspace: run them one after another, after the deferred GEMMs (their partials are in W).
    const deferred = steps.filter((d) => d.label.startsWith('seg'));
    const mine = steps.filter((d) => d.label.startsWith('own'));
    rt.run([...deferred, splitKReduceSegments(rt, { label: 'seg', workspace: W, c: C, segments, alpha }).dispatch, ...mine]);
    for (const [i, c] of cases.entries()) {
      const [want, got] = [await rt.readF32(own[i], 0, c.M * c.N), await rt.readF32(C, cAt[i] * 4, c.M * c.N)];
      // Not a run that did nothing (an invalid dispatch leaves both zero).
      expect(want.some((x) => x !== 0)).toBe(true);
      expect(new Uint32Array(got.buffer), c.variant).toEqual(new Uint32Array(want.buffer));
    }
  }, 120_000);

  it('refuses segments past their bindings, too many, none, or a workspace that is c', async () => {
    const rt = await testRuntime();
    const [W, C] = [rt.createBuffer('workspace', 'seg.w', 4096), rt.createBuffer('workspace', 'seg.c', 1024)];
    const seg = { c: 0, size: 64, parts: 4, ws: 0 };
    const reduce = (segments: SplitKSegment[], workspace = W) => splitKReduceSegments(rt, { label: 'seg', workspace, c: C, segments });
    expect(() => reduce([{ ...seg, c: 200 }])).toThrow(/runs past its bindings/);
    expect(() => reduce([{ ...seg, ws: 800 }])).toThrow(/runs past its bindings/);
    expect(() => reduce([{ ...seg, parts: 1 }])).toThrow(/bad split-K segment/);
    expect(() => reduce([])).toThrow(/1\.\.15 split-K segments/);
    expect(() => reduce(Array.from({ length: MAX_SPLIT_K_SEGMENTS + 1 }, () => ({ ...seg, size: 1 })))).toThrow(/got 16/);
    expect(() => reduce([seg], C)).toThrow(/different buffer from c/);
    // A deferred GEMM that would accumulate: its reduce cannot.
    const a = rt.createBuffer('workspace', 'seg.a', 64 * 64 * 4);
    expect(() => buildMatmul(rt, { label: 'acc', a, b: a, c: C, M: 16, N: 16, K: 64, workspace: W, deferReduce: true, accumulate: true })).toThrow(/does not accumulate/);
  });
});
