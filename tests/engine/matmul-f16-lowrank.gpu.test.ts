/**
 * The f16 GEMMs' low-rank epilogue (matmul-f16/epilogue.ts: + s·Uᵀ·op(V) in the base GEMM's one pass,
 * LoRA's fused up-projection and dX term) on their f32 twins, which run here without shader-f16 or
 * subgroup matrices: the SIMT kernel and the tensor-core kernel with emulated matrices (whole blocks,
 * where its direct tile store would otherwise run), the forward's NT form with V [N, r] and the dX
 * form NN with V [r, N] (V [N, r] read as vec4s where r is a multiple of 4), against the f16
 * reference plus the low-rank term.
 */
import { describe, expect, it } from 'vitest';
import { buildMatmulF16 } from '../../src/engine/kernels/matmul-f16/matmul-f16';
import { lowRankRef, matmulF16Ref } from '../../src/engine/kernels/matmul-f16/matmul-f16.ref';
import { type F16TcSpec, FORM_TRANS } from '../../src/engine/kernels/matmul-f16/plan';
import { matmulRef } from '../../src/engine/kernels/matmul/matmul.ref';
import { roundF16 } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';

interface Case { M: number; N: number; K: number; form: 'NT' | 'NN'; rank: number; scale: number; alpha?: number; accumulate?: boolean; spec?: F16TcSpec }

const TC: Omit<F16TcSpec, 'transA' | 'transB'> = { cfg: { M: 8, N: 8, K: 8 }, sgSize: 16, tilesM: 2, tilesN: 1, sgM: 2, sgN: 1, BK: 16, PAD: 4, direct: true };

async function check(c: Case, seed: number) {
  const rt = await testRuntime();
  const rng = new Rng(seed);
  const t = FORM_TRANS[c.form];
  const transV = c.form === 'NT';
  const [a, b] = [rng.uniformArray(c.M * c.K).map(roundF16), rng.uniformArray(c.K * c.N).map(roundF16)];
  const [u, v, c0] = [rng.uniformArray(c.rank * c.M), rng.uniformArray(c.rank * c.N), rng.uniformArray(c.M * c.N)];
  const bufs = [a, b, c0, u, v].map((x, i) => rt.upload('workspace', `lr16.${i}`, x));
  try {
    const built = buildMatmulF16(rt, {
      label: 'lr16', M: c.M, N: c.N, K: c.K, ...t, a: bufs[0], b: bufs[1], c: bufs[2], alpha: c.alpha, accumulate: c.accumulate, elem: 'f32',
      path: c.spec ? 'f16-tensor-core' : 'f16-simt', spec: c.spec && { ...c.spec, ...t },
      lowRank: { u: bufs[3], v: bufs[4], rank: c.rank, scale: c.scale, transV },
    });
    rt.run(built.dispatches);
    const got = await rt.readF32(bufs[2], 0, c.M * c.N);
    const want = matmulF16Ref(a, b, c.M, c.N, c.K, { ...t, alpha: c.alpha, c0: c.accumulate ? c0 : undefined }).c;
    // On the tensor cores (alpha 1, N a multiple of 4) U and s·V are multiplied as f16, as the operands are.
    const tensorCores = !!c.spec && (c.alpha ?? 1) === 1 && c.N % 4 === 0;
    const lr = lowRankRef(u, v, c.M, c.N, c.rank, { transV, scale: c.scale, tensorCores }).c;
    if (!tensorCores) expectClose(lr, matmulRef(u, v, c.M, c.N, c.rank, { transA: true, transB: transV, alpha: c.scale }), { atol: 1e-5, rtol: 1e-6, label: 'lowRankRef' });
    expectClose(got, Float64Array.from(want, (x, i) => x + lr[i]), { atol: 1e-4, rtol: 1e-5, label: `${c.form} ${c.M}x${c.N}x${c.K} r${c.rank} ${built.kernel}` });
    built.uniforms.forEach((x) => rt.mem.free(x));
    return built;
  } finally {
    bufs.forEach((x) => rt.mem.free(x));
  }
}

describe('f16 GEMM low-rank epilogue (f32 twins)', () => {
  it('SIMT: forward NT with V [N, r] (accumulating), dX NN with V [r, N] (alpha 0.5), partial blocks', async () => {
    const b1 = await check({ M: 37, N: 29, K: 20, form: 'NT', rank: 3, scale: 2, accumulate: true }, 1);
    await check({ M: 68, N: 72, K: 16, form: 'NN', rank: 12, scale: -0.5, alpha: 0.5 }, 2);
    // V [N, r] with r a multiple of 4: read as vec4s.
    await check({ M: 33, N: 20, K: 12, form: 'NT', rank: 16, scale: 2 }, 5);
    expect(b1.dispatches[0].label).toMatch(/simt NT .* \+lr3\]$/);
  }, 60_000);

  it('tensor cores (emulated): the term multiplied on the tensor cores (f16 U and s·V staged a K of ranks at a time, zero past r, M and N), then the direct store; both forms', async () => {
    const b1 = await check({ M: 64, N: 16, K: 32, form: 'NT', rank: 4, scale: 1.5, spec: { ...TC, ...FORM_TRANS.NT } }, 3);
    await check({ M: 64, N: 16, K: 32, form: 'NN', rank: 8, scale: 0.25, spec: { ...TC, ...FORM_TRANS.NN } }, 4);
    // Several rank passes (r 20 = 8 + 8 + 4), accumulating, whole and partial blocks (M 37, N 20: the partial ones store through the scratch).
    await check({ M: 37, N: 20, K: 24, form: 'NT', rank: 20, scale: -0.75, accumulate: true, spec: { ...TC, ...FORM_TRANS.NT } }, 6);
    await check({ M: 40, N: 28, K: 16, form: 'NN', rank: 16, scale: 2, accumulate: true, spec: { ...TC, ...FORM_TRANS.NN } }, 7);
    expect(b1.dispatches[0].label).toMatch(/\+lr4\]$/);
  }, 60_000);

  it('tensor cores (emulated): alpha ≠ 1 or N not a multiple of 4 keep the per-element lowRank() in f32', async () => {
    await check({ M: 64, N: 16, K: 32, form: 'NT', rank: 4, scale: 1.5, alpha: 0.5, spec: { ...TC, ...FORM_TRANS.NT } }, 8);
    await check({ M: 36, N: 18, K: 16, form: 'NT', rank: 8, scale: 0.5, accumulate: true, spec: { ...TC, ...FORM_TRANS.NT } }, 9);
  }, 60_000);

  it('refuses a split or a low-rank binding aliasing C', async () => {
    const rt = await testRuntime();
    const x = rt.createBuffer('workspace', 'lr16.x', 4096);
    const y = rt.createBuffer('workspace', 'lr16.y', 4096);
    const args = { label: 'lr16', M: 8, N: 8, K: 8, a: x, b: x, c: y, elem: 'f32' as const, path: 'f16-simt' as const };
    expect(() => buildMatmulF16(rt, { ...args, split: 2, workspace: rt.createBuffer('workspace', 'lr16.ws', 4096), lowRank: { u: x, v: x, rank: 2, scale: 1 } })).toThrow(/one pass/);
    expect(() => buildMatmulF16(rt, { ...args, lowRank: { u: y, v: x, rank: 2, scale: 1 } })).toThrow(/different buffer from c/);
  });
});
