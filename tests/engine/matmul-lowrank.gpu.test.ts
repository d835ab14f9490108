/**
 * The GEMM's low-rank epilogue (matmul.ts `lowRank`, LoRA's fused y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ and
 * dX = dY·W + s·(dY·B)·A) vs matmulRef plus s·Uᵀ·op(V): the scalar and vec4 paths of U and V, V as
 * PEFT's B [N, r] (transV) and as A [r, N], partial and whole tiles, TM 4 and 8 × TN 4 and 16,
 * accumulate and alpha ≠ 1. Each case is a pipeline of its own (SwiftShader compiles them in seconds).
 */
import { describe, expect, it } from 'vitest';
import { buildMatmul, matmul } from '../../src/engine/kernels/matmul/matmul';
import { matmulCode } from '../../src/engine/kernels/matmul/wgsl';
import { testRuntime } from '../helpers/gpu';
import { checkMatmuls } from './matmul.cases';

describe('matmul low-rank epilogue', () => {
  it('matches the reference: scalar and vec4 U/V, V [N, r] and [r, N], partial and whole tiles, TM×TN 4×4 and 8×16', async () => {
    const rt = await testRuntime();
    const ran = await checkMatmuls(rt, [
      // No dimension a multiple of 4: scalar U, V, C; accumulate with alpha -0.75; rank 3.
      { M: 37, N: 29, K: 19, transB: true, accumulate: true, alpha: -0.75, variant: '32x32k16_4x4', lr: { rank: 3, scale: 2, transV: true } },
      // dX's form: NN, V [r, N] as vec4, U as vec4 (M % 4 == 0), partial tiles.
      { M: 36, N: 44, K: 20, variant: '32x32k16_4x4', lr: { rank: 12, scale: 0.5 } },
      // The model's 8×16 micro tile, Y = X·Wᵀ with PEFT's B [N, r] staged 2·BK = 16 of its columns a chunk (16, then 4); whole tiles.
      { M: 128, N: 128, K: 16, transB: true, variant: '128x128k8_8x16', lr: { rank: 20, scale: 1.5, transV: true } },
      // 8×16 on partial tiles, V [r, N], accumulating.
      { M: 132, N: 136, K: 8, accumulate: true, variant: '128x128k8_8x16', lr: { rank: 5, scale: -1 } },
    ]);
    expect(ran.map((r) => r.fullTiles)).toEqual([false, false, true, false]);
  }, 120_000);

  it('leaves every pipeline without it as it was, and refuses what it cannot run', async () => {
    // The option off is the same text (tests/engine/matmul.pipelines.test.ts pins every pipeline's digest).
    expect(matmulCode(true, true, true, 8, true)).toBe(matmulCode(true, true, true, 8, true, false, false, undefined));
    expect(matmulCode(true, true, true, 8, true, false, false, { vecU: true, vecV: false })).toMatch(/LR_TRANS_V/);
    expect(() => matmulCode(true, true, true, 8, true, true, false, { vecU: true, vecV: true })).toThrow(/stream-K/);
    const rt = await testRuntime();
    const buf = rt.createBuffer('workspace', 'lr', 4096);
    const other = rt.createBuffer('workspace', 'lr.c', 4096);
    const args = { label: 'lr', a: buf, b: buf, c: other, M: 8, N: 8, K: 8 };
    expect(() => matmul(rt, { ...args, lowRank: { u: buf, v: buf, rank: 0, scale: 1 } })).toThrow(/rank must be/);
    expect(() => matmul(rt, { ...args, lowRank: { u: buf, v: other, rank: 2, scale: 1 } })).toThrow(/different buffer from c/);
    expect(() => matmul(rt, { ...args, alpha: 0, lowRank: { u: buf, v: buf, rank: 2, scale: 1 } })).toThrow(/alpha/);
    expect(() => matmul(rt, { ...args, lowRank: { u: { buffer: buf, offset: 0, size: 32 }, v: buf, rank: 2, scale: 1 } })).toThrow(/lowRank.u has 32 bytes, needs 64/);
    expect(() => buildMatmul(rt, { ...args, workspace: rt.createBuffer('workspace', 'ws', 4096), lowRank: { u: buf, v: buf, rank: 2, scale: 1 } })).toThrow(/one pass/);
  });
});
