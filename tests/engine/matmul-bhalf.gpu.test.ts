/**
 * The fp32 GEMM with B as packed f16 (matmul.ts bHalf, io.wgsl b_half: LoRA's thin GEMMs over an f16
 * saved cell): bit for bit the same choice over B's fp32 unpack (widening an f16 value is exact, the
 * sums run in the same order), B [K, N] and [N, K], partial and whole tiles, split-K; and the shapes it refuses.
 */
import { describe, expect, it } from 'vitest';
import { packF16Ref, roundF16Ref } from '../../src/engine/kernels/f16/f16.ref';
import { buildMatmul, matmul } from '../../src/engine/kernels/matmul/matmul';
import { matmulWorkspaceBytes } from '../../src/engine/kernels/matmul/plan';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('matmul with a packed f16 B', () => {
  it('equals the GEMM over B unpacked to fp32, bit for bit', async () => {
    const rt = await testRuntime();
    const rng = new Rng(7);
    const cases = [
      // uᵀ = A·xᵀ's form (B = x [N, K] as stored), partial tiles.
      { M: 20, N: 36, K: 28, transB: true, variant: '32x32k16_4x4' },
      // dA = vᵀ·x's form (B = x [K, N]), whole tiles, accumulating with alpha.
      { M: 32, N: 64, K: 32, accumulate: true, alpha: 0.5, variant: '32x32k16_4x4' },
      // Split over K (the thin GEMMs' pick at the model's shapes), both forms.
      { M: 32, N: 32, K: 96, variant: '32x32k16_4x4_sk3' },
      { M: 24, N: 40, K: 64, transB: true, variant: '32x32k16_4x4_sk2' },
    ];
    for (const c of cases) {
      const a = rng.uniformArray(c.M * c.K);
      const b = roundF16Ref(rng.uniformArray(c.K * c.N));
      const c0 = rng.uniformArray(c.M * c.N);
      const A = rt.upload('workspace', 'bh.a', a);
      const B32 = rt.upload('workspace', 'bh.b32', b);
      const B16 = rt.upload('workspace', 'bh.b16', packF16Ref(new Uint32Array(b.buffer)));
      const [C32, C16] = [rt.upload('workspace', 'bh.c32', c0), rt.upload('workspace', 'bh.c16', c0)];
      const wsBytes = matmulWorkspaceBytes(c, c.variant);
      const ws = wsBytes ? rt.createBuffer('workspace', 'bh.ws', wsBytes) : undefined;
      const ref = buildMatmul(rt, { label: 'bh.f32', ...c, a: A, b: B32, c: C32, workspace: ws });
      const half = buildMatmul(rt, { label: 'bh.f16', ...c, a: A, b: B16, c: C16, workspace: ws, bHalf: true });
      expect(half.variant).toBe(c.variant);
      expect(half.dispatches[0].label).toMatch(/ Bf16\]$/);
      rt.run([...ref.dispatches, ...half.dispatches]);
      const [want, got] = [await rt.readF32(C32, 0, c.M * c.N), await rt.readF32(C16, 0, c.M * c.N)];
      expect(new Uint32Array(got.buffer), c.variant).toEqual(new Uint32Array(want.buffer));
      for (const x of [A, B32, B16, C32, C16, ...(ws ? [ws] : []), ...ref.uniforms, ...half.uniforms]) rt.mem.free(x);
    }
  }, 120_000);

  it('refuses a B it cannot read as vec4 groups of f16', async () => {
    const rt = await testRuntime();
    const buf = rt.createBuffer('workspace', 'bh', 4096);
    const c = rt.createBuffer('workspace', 'bh.c', 4096);
    const args = { label: 'bh', a: buf, b: buf, c, M: 8, N: 8, K: 8, bHalf: true };
    expect(() => matmul(rt, { ...args, N: 6 })).toThrow(/multiple of 4/);
    expect(() => matmul(rt, { ...args, K: 6, transB: true })).toThrow(/multiple of 4/);
    expect(() => matmul(rt, { ...args, b: { buffer: buf, offset: 4, size: 128 } })).toThrow(/8-byte/);
    // Half the bytes of an fp32 B: 8·8 f16 values fit 128 bytes, not 127.
    expect(() => matmul(rt, { ...args, b: { buffer: buf, offset: 0, size: 127 } })).toThrow(/has 127 bytes, needs 128/);
  });
});
