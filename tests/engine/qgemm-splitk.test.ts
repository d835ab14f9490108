/** The split-K choice and slicing of qgemmI8 (src/engine/kernels/qgemm/splitk.ts) and the tensor-core kernel's split code: pure TS. */
import { describe, expect, it } from 'vitest';
import { chooseI8SplitK, I8_MAX_K, i8SplitPlan, i8SplitWorkspaceBytes, type I8SplitShape } from '../../src/engine/kernels/qgemm/splitk';
import { i8TcShapeOk, i8TcSplitShape, qgemmI8TcCode, type I8TcSpec } from '../../src/engine/kernels/qgemm/tc';
import { I8_TC_LAYOUTS } from '../../src/engine/kernels/qgemm/tc-tables';

const CFG = { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 } as const;
const spec: I8TcSpec = { cfg: CFG, syntax: 'template', unitDiv: 1, sgSize: 32, ...I8_TC_LAYOUTS[0] };
const tc = (M: number, N: number, K: number): I8SplitShape => i8TcSplitShape(spec, M, N, K);
const BIG = 2 ** 40;

describe('INT8 split-K choice', () => {
  it('splits base\'s dW GEMMs (K = 8192 tokens) as far as one wave of 128×128 blocks allows', () => {
    // 36 blocks: 7 slices fill one wave of 256 resident workgroups, 8 would need two.
    expect(chooseI8SplitK(tc(768, 768, 8192), BIG)).toBe(7);
    // 120 blocks: two slices.
    expect(chooseI8SplitK(tc(768, 2560, 8192), BIG)).toBe(2);
    expect(chooseI8SplitK(tc(2560, 768, 8192), BIG)).toBe(2);
  });

  it('only counts whose partials fit the workspace, under the cap; none for big outputs or short K', () => {
    const s = tc(768, 768, 8192);
    expect(chooseI8SplitK(s, i8SplitWorkspaceBytes(768, 768, 3))).toBe(3);
    expect(chooseI8SplitK(s, i8SplitWorkspaceBytes(768, 768, 2) - 1)).toBe(1);
    expect(chooseI8SplitK(s, 0)).toBe(1);
    expect(chooseI8SplitK(s, BIG, 4)).toBe(4);
    expect(chooseI8SplitK(s, BIG, 1)).toBe(1);
    expect(chooseI8SplitK(tc(4096, 4096, 8192), BIG)).toBe(1);
    expect(chooseI8SplitK(tc(768, 768, 64), BIG)).toBe(1); // one K step of 64 bytes
  });

  it('cuts K into whole K steps, fewer slices where K has fewer steps, and refuses indices past u32', () => {
    const s = tc(768, 768, 8192); // 512 vec4s, steps of 4
    expect(i8SplitPlan(s, 7)).toEqual({ kChunk: 76, parts: 7 });
    expect(i8SplitPlan(s, 1)).toEqual({ kChunk: 512, parts: 1 });
    expect(i8SplitPlan(tc(8, 8, 48), 8)).toEqual({ kChunk: 4, parts: 1 });
    expect(() => i8SplitPlan(tc(65536, 65536, 8192), 2)).toThrow(/overflow u32/);
    expect(() => i8SplitPlan(s, 1.5)).toThrow(/positive integer/);
  });

  it('the tensor-core path takes K up to the overflow bound', () => {
    expect(I8_MAX_K * 128 * 128).toBeLessThan(2 ** 31);
    expect((I8_MAX_K + 1) * 128 * 128).toBeGreaterThanOrEqual(2 ** 31);
    expect(i8TcShapeOk(8192)).toBe(true);
    expect(i8TcShapeOk(131_072)).toBe(false);
  });
});

describe('the tensor-core kernel of one K slice', () => {
  it('runs its slice of K and writes raw i32 sums to its part of the workspace; one pass keeps its code', () => {
    const one = qgemmI8TcCode(spec);
    const part = qgemmI8TcCode(spec, false, true);
    expect(part).toContain('let kb = wid.z * P.KC;');
    expect(part).toContain('let ke = min(P.KV, kb + P.KC);');
    expect(part).toContain('for (var k0 = kb; k0 < ke; k0 += 4u)');
    expect(part).toContain('if (k0 + 4u < ke)');
    expect(part).toContain('c < ke); }');
    expect(part).not.toContain('c < P.KV); }');
    expect(part).toContain('PARTS[(wid.z * P.M + row) * P.N + col] = S[');
    expect(part).not.toMatch(/SX|SW|\bC\[/);
    expect(part.match(/@binding\(\d\)/g)).toEqual(['@binding(0)', '@binding(1)', '@binding(2)', '@binding(3)']);
    // The same multiply-accumulate body as the one pass.
    const body = (c: string) => c.match(/subgroupMatrix\w+\([^;]*;/g);
    expect(body(part)).toEqual(body(one));
    expect(one).not.toMatch(/\bkb\b|\bke\b|PARTS/);
    expect(one).toContain('for (var k0 = 0u; k0 < P.KV; k0 += 4u)');
  });
});
