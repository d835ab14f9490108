/**
 * Split-K of qgemmI8 (src/engine/kernels/qgemm/splitk.ts) on the dot4 kernel, which SwiftShader
 * runs: the split result must be the unsplit one bit for bit (the i32 partials add up exactly and
 * the epilogue is the same), for K not a multiple of the slices or the K step, M and N not
 * multiples of the block, and the accumulate mode; the choice, the cap and the checks.
 */
import { describe, expect, it } from 'vitest';
import { type GemmTiles, qgemmI8, qgemmI8SplitK, qgemmI8Steps } from '../../src/engine/kernels/qgemm/qgemm';
import { qgemmI8ExactRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { I8_MAX_K, setI8SplitKMax } from '../../src/engine/kernels/qgemm/splitk';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up, track } = trackBuffers();

/** Random int8 codes over the full −128..127 range (the overflow bound's worst case), packed four to a word. */
function codes(rng: Rng, n: number): { values: Int8Array; words: Uint32Array } {
  const values = Int8Array.from({ length: n }, () => (rng.nextU32() >>> 24) - 128);
  return { values, words: new Uint32Array(values.buffer.slice(0)) };
}

async function operands(M: number, N: number, K: number, seed: number) {
  const rt = await testRuntime();
  const rng = new Rng(seed);
  const X = codes(rng, M * K);
  const W = codes(rng, N * K);
  const sx = Float32Array.from({ length: M }, () => 1e-3 + rng.next() * 1e-2);
  const sw = Float32Array.from({ length: N }, () => 1e-3 + rng.next() * 1e-2);
  const c0 = rng.normalArray(M * N);
  return { rt, X, W, sx, sw, c0, args: { xq: up(rt, X.words), sx: up(rt, sx), wq: up(rt, W.words), sw: up(rt, sw), M, N, K } };
}

const bits = (f: Float32Array) => Array.from(new Uint32Array(f.buffer, f.byteOffset, f.length));

describe('qgemmI8 split over K (dot4)', () => {
  // [M, N, K, tiles]: K in words 37 (5 steps of 8: a partial last step), 1 word, 200 words over steps of 4.
  const cases: [number, number, number, GemmTiles | undefined][] = [
    [70, 33, 148, undefined],
    [5, 3, 4, undefined],
    [33, 65, 800, { BM: 32, BN: 32, TM: 4, TN: 4, BK: 4 }],
  ];
  it.each(cases)('%ix%ix%i: every slice count gives the unsplit bits, with and without accumulate', async (M, N, K, tiles) => {
    const { rt, X, W, sx, sw, c0, args } = await operands(M, N, K, M + N + K);
    const run = async (accumulate: boolean, splitK: number) => {
      const c = up(rt, c0);
      const ws = track(rt.createBuffer('workspace', 'ws', 64 * M * N * 4));
      const g = qgemmI8Steps(rt, { label: 'splitk', ...args, c, tiles, accumulate, splitK, workspace: ws });
      rt.run(g.dispatches);
      return { got: await rt.readF32(c, 0, M * N), parts: g.splitK, n: g.dispatches.length };
    };
    const exact = qgemmI8ExactRef(X.values, sx, W.values, sw, M, N, K);
    for (const accumulate of [false, true]) {
      const one = await run(accumulate, 1);
      expect(one.n).toBe(1);
      const want = accumulate ? Float32Array.from(exact, (y, i) => c0[i] + y) : exact;
      expect(bits(one.got), `unsplit vs the exact reference (accumulate ${accumulate})`).toEqual(bits(want));
      const kSteps = Math.ceil(K / 4 / (tiles?.BK ?? 8));
      for (const S of [2, 3, 5, 64]) {
        const r = await run(accumulate, S);
        // As many slices as asked, no more than K steps; one K step: one pass.
        expect(r.parts, `S=${S}`).toBeLessThanOrEqual(Math.min(S, kSteps));
        expect(r.parts > 1, `S=${S}`).toBe(kSteps > 1);
        expect(r.n).toBe(r.parts > 1 ? 2 : 1);
        expect(bits(r.got), `${M}x${N}x${K} S=${S} (${r.parts} slices), accumulate ${accumulate}`).toEqual(bits(one.got));
      }
    }
  });

  it('chooses a split for a few blocks over a long K where the workspace allows, and none without one or under a cap of 1', async () => {
    const [M, N, K] = [40, 24, 1024];
    const { rt, args } = await operands(M, N, K, 3);
    const c = track(rt.createBuffer('workspace', 'c', M * N * 4));
    const ws = track(rt.createBuffer('workspace', 'ws', 16 * M * N * 4));
    const auto = qgemmI8SplitK(rt, { label: 'choice', ...args, c, workspace: ws });
    expect(auto).toBeGreaterThan(1);
    expect(qgemmI8SplitK(rt, { label: 'choice', ...args, c })).toBe(1);
    const small = track(rt.createBuffer('workspace', 'ws2', 2 * M * N * 4));
    expect(qgemmI8SplitK(rt, { label: 'choice', ...args, c, workspace: small })).toBe(2);
    try {
      setI8SplitKMax(rt, 1);
      expect(qgemmI8SplitK(rt, { label: 'choice', ...args, c, workspace: ws })).toBe(1);
      setI8SplitKMax(rt, 3);
      expect(qgemmI8SplitK(rt, { label: 'choice', ...args, c, workspace: ws })).toBeLessThanOrEqual(3);
    } finally {
      setI8SplitKMax(rt, undefined);
    }
    // The chosen split computes the one-pass bits.
    const g = qgemmI8Steps(rt, { label: 'auto', ...args, c, workspace: ws });
    expect(g.splitK).toBe(auto);
    rt.run(g.dispatches);
    const split = await rt.readF32(c, 0, M * N);
    rt.run([qgemmI8(rt, { label: 'one', ...args, c })]);
    expect(bits(split)).toEqual(bits(await rt.readF32(c, 0, M * N)));
  });

  it('refuses a workspace too small or shared with an operand, and a K whose sums could overflow i32', async () => {
    const rt = await testRuntime();
    const b = track(rt.createBuffer('workspace', 'b', 4096));
    const small = track(rt.createBuffer('workspace', 's', 64));
    const a = { label: 'bad', xq: b, sx: b, wq: b, sw: b, M: 4, N: 4, K: 64 };
    const c = track(rt.createBuffer('workspace', 'c', 64));
    expect(() => qgemmI8Steps(rt, { ...a, c, splitK: 2, workspace: small })).toThrow(/needs a workspace of 128 bytes, have 64/);
    expect(() => qgemmI8Steps(rt, { ...a, c, splitK: 2, workspace: b })).toThrow(/buffer of its own/);
    expect(() => qgemmI8Steps(rt, { ...a, c, splitK: 2 })).toThrow(/needs a workspace/);
    expect(() => qgemmI8Steps(rt, { ...a, c, splitK: 0, workspace: b })).toThrow(/positive integer/);
    expect(() => qgemmI8(rt, { ...a, c, K: I8_MAX_K + 1 })).toThrow(/overflow/);
    expect(() => qgemmI8Steps(rt, { ...a, c, K: (I8_MAX_K + 1) * 4, splitK: 8, workspace: b })).toThrow(/overflow/);
    expect(() => setI8SplitKMax(rt, 0)).toThrow(/positive integer/);
  });
});
