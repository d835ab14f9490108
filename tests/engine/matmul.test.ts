import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { chooseMatmulVariant } from '../../src/engine/kernels/matmul/choice';
import {
  matmulWorkspaceBytes, MAX_SPLIT_K, parseChoice, shapeKey, splitPlan, streamKPlan, vectorFlags,
} from '../../src/engine/kernels/matmul/plan';
import {
  availableVariants, getVariant, MATMUL_VARIANTS, variantFits, variantIsWellFormed, variantName, variantSharedBytes,
} from '../../src/engine/kernels/matmul/variants';
import { matmulCode, nextBufferByModulo, streamKMain, unrollKSteps } from '../../src/engine/kernels/matmul/wgsl';
import { matmulRef, transposeRef } from '../../src/engine/kernels/matmul/matmul.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

const H200_LIKE = { maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024 };
const SWIFTSHADER_LIKE = { maxComputeWorkgroupStorageSize: 32768, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256 };

describe('matmulRef', () => {
  it('a known 2×3 · 3×2 product, with alpha and c0', () => {
    const a = [1, 2, 3, 4, 5, 6]; // [[1,2,3],[4,5,6]]
    const b = [7, 8, 9, 10, 11, 12]; // [[7,8],[9,10],[11,12]]
    expect(Array.from(matmulRef(a, b, 2, 2, 3))).toEqual([58, 64, 139, 154]);
    expect(Array.from(matmulRef(a, b, 2, 2, 3, { alpha: -2, c0: [1, 1, 1, 1] }))).toEqual([-115, -127, -277, -307]);
    // The same product from transposed storage.
    const aT = transposeRef(a, 2, 3);
    const bT = transposeRef(b, 3, 2);
    expect(Array.from(matmulRef(aT, bT, 2, 2, 3, { transA: true, transB: true }))).toEqual([58, 64, 139, 154]);
  });

  it('transA / transB read transposed storage (property)', () => {
    fc.assert(fc.property(fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 6 }), fc.integer({ min: 1, max: 6 }),
      fc.boolean(), fc.boolean(), fc.integer(), (M, N, K, tA, tB, seed) => {
        const rng = new Rng(seed);
        const a = rng.uniformArray(M * K);
        const b = rng.uniformArray(K * N);
        const want = matmulRef(a, b, M, N, K);
        const got = matmulRef(tA ? transposeRef(a, M, K) : a, tB ? transposeRef(b, K, N) : b, M, N, K, { transA: tA, transB: tB });
        expectClose(got, want, { atol: 1e-12, rtol: 0 });
      }), { numRuns: 50 });
  });

  it('the model\'s backward forms match central differences of L = Σ G ⊙ (X·Wᵀ)', () => {
    // Y[M,N] = X[M,K]·W[N,K]ᵀ; dX = G·W (NN), dW = Gᵀ·X (transA): the transposes the model uses.
    const [M, N, K] = [3, 4, 5];
    const rng = new Rng(3);
    const x = Float64Array.from(rng.uniformArray(M * K));
    const w = Float64Array.from(rng.uniformArray(N * K));
    const g = Float64Array.from(rng.uniformArray(M * N));
    const loss = () => matmulRef(x, w, M, N, K, { transB: true }).reduce((s, y, i) => s + y * g[i], 0);
    const fd = (p: Float64Array) => Float64Array.from(p, (_, i) => {
      const h = 1e-6;
      const v = p[i];
      p[i] = v + h;
      const up = loss();
      p[i] = v - h;
      const down = loss();
      p[i] = v;
      return (up - down) / (2 * h);
    });
    expectClose(matmulRef(g, w, M, K, N), fd(x), { atol: 1e-8, rtol: 1e-7, label: 'dX' });
    expectClose(matmulRef(g, x, N, K, M, { transA: true }), fd(w), { atol: 1e-8, rtol: 1e-7, label: 'dW' });
  });

  it('rejects short inputs', () => {
    expect(() => matmulRef([1, 2], [1, 2, 3], 2, 1, 2)).toThrow(/A has 2/);
  });
});

describe('variants and heuristic', () => {
  it('every variant is well formed and has a unique name', () => {
    expect(new Set(MATMUL_VARIANTS.map((v) => v.name)).size).toBe(MATMUL_VARIANTS.length);
    for (const v of MATMUL_VARIANTS) {
      expect(variantIsWellFormed(v), v.name).toBe(true);
      expect(v.name).toBe(variantName(v));
      expect(v.name).toMatch(new RegExp(`^${v.BM}x${v.BN}k${v.BK}_${v.TM}x${v.TN}(_np)?(_sw\\d+)?(_ia)?$`));
      expect(variantFits(v, H200_LIKE), v.name).toBe(true);
    }
    expect(variantName({ ...getVariant('128x128k8_8x8'), prefetch: false, swizzle: 8 })).toBe('128x128k8_8x8_np_sw8');
    expect(variantName({ ...getVariant('128x128k8_8x8'), lean: true })).toBe('128x128k8_8x8_ia');
    expect(getVariant('128x128k8_8x16_ia')).toMatchObject({ BM: 128, BN: 128, BK: 8, TM: 8, TN: 16, lean: true });
    expect(parseChoice('128x128k8_8x16_ia_st264')).toMatchObject({ splitK: 1, streamK: 264, variant: { name: '128x128k8_8x16_ia' } });
    expect(parseChoice('128x256k8_8x16_ia_sk7')).toMatchObject({ splitK: 7, variant: { lean: true } });
    // Every LEAN variant is the twin of a measured variant that is not.
    for (const v of MATMUL_VARIANTS.filter((x) => x.lean)) expect(getVariant(v.name.replace(/_ia$/, '')).lean).toBe(false);
    expect(variantIsWellFormed({ ...getVariant('32x32k16_4x4'), BK: 64 })).toBe(false); // > 4 staging vec4s
    expect(() => getVariant('nope')).toThrow(/unknown variant/);
  });

  it('respects workgroup-memory and invocation limits', () => {
    const big = getVariant('128x128k16_8x8');
    expect(variantSharedBytes(big)).toBeGreaterThan(32768);
    expect(availableVariants(SWIFTSHADER_LIKE).map((v) => v.name)).not.toContain(big.name);
    expect(availableVariants(H200_LIKE)).toHaveLength(MATMUL_VARIANTS.length);
    fc.assert(fc.property(fc.integer({ min: 1, max: 20000 }), fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 1, max: 20000 }),
      (M, N, K) => {
        for (const limits of [H200_LIKE, SWIFTSHADER_LIKE]) expect(variantFits(getVariant(chooseMatmulVariant({ M, N, K }, limits)), limits)).toBe(true);
        expect(variantSharedBytes(getVariant(chooseMatmulVariant({ M, N, K })))).toBeLessThanOrEqual(16384);
      }), { numRuns: 200 });
  });

  it('picks big tiles for big GEMMs and narrow ones for the vocab-65 logits', () => {
    // The 8×16 micro tile Hopper's tuning picks (tables.ts, the H100's tune) on the big shapes.
    expect(chooseMatmulVariant({ M: 4096, N: 4096, K: 4096 }, H200_LIKE)).toBe('128x128k8_8x16_ia');
    expect(chooseMatmulVariant({ M: 16384, N: 3072, K: 768, transB: true }, H200_LIKE)).toBe('128x128k8_8x16_ia');
    expect(chooseMatmulVariant({ M: 16384, N: 65, K: 768, transB: true }, H200_LIKE)).toBe('128x32k16_8x4');
    // A tiny GEMM is one wave whatever the tile: the least work per thread (a small micro tile) wins.
    const tiny = getVariant(chooseMatmulVariant({ M: 1, N: 1, K: 1 }, H200_LIKE));
    expect(tiny.TM * tiny.TN).toBeLessThanOrEqual(32);
  });

  it('split-K only with a workspace, for few tiles and a long K (the dW GEMMs), within the workspace', () => {
    const dW = { M: 384, N: 384, K: 16384, transA: true };
    expect(parseChoice(chooseMatmulVariant(dW, H200_LIKE)).splitK).toBe(1);
    const ws = 64 << 20;
    const pick = chooseMatmulVariant(dW, H200_LIKE, { workspaceBytes: ws });
    expect(parseChoice(pick).splitK).toBeGreaterThan(1);
    expect(matmulWorkspaceBytes(dW, pick)).toBeLessThanOrEqual(ws);
    // Enough tiles already: no split even with a workspace.
    expect(parseChoice(chooseMatmulVariant({ M: 16384, N: 1024, K: 384, transB: true }, H200_LIKE, { workspaceBytes: ws })).splitK).toBe(1);
    fc.assert(fc.property(fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 1, max: 4096 }), fc.integer({ min: 1, max: 1 << 16 }),
      fc.integer({ min: 0, max: 1 << 26 }), (M, N, K, w) => {
        const c = chooseMatmulVariant({ M, N, K }, H200_LIKE, { workspaceBytes: w });
        expect(matmulWorkspaceBytes({ M, N, K }, c)).toBeLessThanOrEqual(w);
      }), { numRuns: 200 });
  });

  it('split plans cover K exactly once with whole BK tiles; choice names parse or are refused', () => {
    expect(splitPlan(200, 16, 4)).toEqual({ kChunk: 64, parts: 4 }); // 13 tiles: 4+4+4+1
    expect(splitPlan(20, 16, 8)).toEqual({ kChunk: 16, parts: 2 }); // only 2 tiles
    fc.assert(fc.property(fc.integer({ min: 1, max: 1 << 20 }), fc.constantFrom(8, 16), fc.integer({ min: 1, max: MAX_SPLIT_K }), (K, BK, S) => {
      const { kChunk, parts } = splitPlan(K, BK, S);
      expect(kChunk % BK).toBe(0);
      expect(parts).toBeLessThanOrEqual(S);
      expect(parts * kChunk).toBeGreaterThanOrEqual(K);
      expect((parts - 1) * kChunk).toBeLessThan(K); // no empty slice
      expect(splitPlan(K, BK, parts)).toEqual({ kChunk, parts }); // a choice named by its slice count means the same split
    }), { numRuns: 300 });
    expect(parseChoice('64x64k16_4x4_sk8')).toMatchObject({ splitK: 8, variant: { name: '64x64k16_4x4' } });
    expect(parseChoice('64x64k16_4x4').splitK).toBe(1);
    expect(() => parseChoice('64x64k16_4x4_sk1')).toThrow(/split-K/);
    expect(() => parseChoice(`64x64k16_4x4_sk${MAX_SPLIT_K * 2}`)).toThrow(/split-K/);
    expect(() => parseChoice('nope_sk4')).toThrow(/unknown variant/);
    expect(matmulWorkspaceBytes({ M: 10, N: 20, K: 1000 }, '64x64k16_4x4_sk4')).toBe(4 * 10 * 20 * 4);
    expect(matmulWorkspaceBytes({ M: 10, N: 20, K: 1000 }, '64x64k16_4x4')).toBe(0);
  });

  it('stream-K plans: whole waves of whole tiles, then every k tile of the rest run once, summed once in k order', () => {
    // 4096³ on an H200's 264 workgroups: 3 whole waves, then 232 tiles over 264 workgroups.
    const big = streamKPlan({ M: 4096, N: 4096, K: 4096 }, getVariant('128x128k8_8x16'), 264);
    expect(big).toMatchObject({ tiles: 1024, ipt: 512, dpTiles: 792, skTiles: 232, workgroups: 264, skQ: 449, skR: 248 });
    expect(big.workspaceFloats).toBe(2 * 264 * 128 * 128);
    // Tiles a multiple of W: nothing shared, no workspace (the plain GEMM runs).
    expect(streamKPlan({ M: 256, N: 256, K: 64 }, getVariant('128x128k8_8x16'), 2).workspaceFloats).toBe(0);
    const NO_SLOT = 0xffffffff;
    fc.assert(fc.property(fc.integer({ min: 1, max: 700 }), fc.integer({ min: 1, max: 700 }), fc.integer({ min: 1, max: 3000 }),
      fc.integer({ min: 1, max: 300 }), (M, N, K, W) => {
        const v = getVariant('32x32k16_4x4');
        const p = streamKPlan({ M, N, K }, v, W);
        expect(p.dpTiles + p.skTiles).toBe(p.tiles);
        expect(p.dpTiles % W).toBe(0); // whole waves only
        expect(p.skTiles).toBeLessThan(W);
        if (p.workspaceFloats === 0) return;
        // The table (GEMM side): W first parts in range order, then the second parts longest first.
        const parts = Array.from({ length: p.parts.length / 4 }, (_, j) => Array.from(p.parts.slice(4 * j, 4 * j + 4)));
        expect(parts.slice(0, p.workgroups).every(([, , , slot], w) => slot === NO_SLOT || slot === 2 * w)).toBe(true);
        const seconds = parts.slice(p.workgroups);
        expect(seconds.every(([, kt, , slot]) => kt === 0 && slot % 2 === 1)).toBe(true);
        expect(seconds.map((x) => x[2])).toEqual(seconds.map((x) => x[2]).sort((a, b) => b - a));
        // matmul-streamk.wgsl's begin/owner/slot, in TS: each shared tile sums exactly its parts' slots, in k order.
        const begin = (w: number) => w * p.skQ + Math.min(w, p.skR);
        const owner = (x: number) => {
          const bigPart = p.skR * (p.skQ + 1);
          return x < bigPart ? Math.floor(x / (p.skQ + 1)) : p.skR + Math.floor((x - bigPart) / p.skQ);
        };
        expect(begin(p.workgroups)).toBe(p.skTiles * p.ipt); // the ranges end to end cover the region
        for (let t = 0; t < p.skTiles; t++) {
          const mine = parts.filter((x) => x[0] === p.dpTiles + t).sort((a, b) => a[1] - b[1]);
          let k = 0;
          for (const [, kt, nk] of mine) { expect(kt).toBe(k); k += nk; }
          expect(k).toBe(p.ipt); // every k tile once
          const first = t * p.ipt;
          const [w0, w1] = [owner(first), owner(first + p.ipt - 1)];
          if (w0 === w1) { expect(mine.map((x) => x[3])).toEqual([NO_SLOT]); continue; }
          const summed = [];
          for (let w = w0; w <= w1; w++) summed.push(2 * w + (begin(w) >= first ? 0 : 1));
          expect(mine.map((x) => x[3])).toEqual(summed);
        }
      }), { numRuns: 300 });
    expect(parseChoice('64x64k16_4x4_st264')).toMatchObject({ streamK: 264, splitK: 1, variant: { name: '64x64k16_4x4' } });
    expect(() => parseChoice('64x64k16_4x4_st0')).toThrow(/stream-K/);
    expect(() => parseChoice('128x128k8_8x8_sw8_st264')).toThrow(/swizzled/);
    expect(matmulWorkspaceBytes({ M: 4096, N: 4096, K: 4096 }, '128x128k8_8x16_st264')).toBe(2 * 264 * 128 * 128 * 4);
  });

  it('stream-K WGSL: the plain main() runs the whole waves unchanged, the stream-K body a branch before it', () => {
    const plain = matmulCode(true, true, true, 8, true);
    const sk = matmulCode(true, true, true, 8, true, true);
    const body = (src: string) => src.slice(src.indexOf('nwg: vec3<u32>) {\n'));
    const plainMain = body(plain);
    const skMain = body(sk);
    // The plain GEMM's main() body follows the branch word for word.
    expect(skMain.endsWith(plainMain.slice('nwg: vec3<u32>) {\n'.length))).toBe(true);
    expect(skMain).toContain('if (wid.y * nwg.x + wid.x >= SP.dpTiles) {');
    const branch = skMain.slice(0, skMain.length - plainMain.length);
    expect(branch).toContain('storeRowSK(');
    expect(branch).not.toMatch(/\bstoreRow\(/);
    for (const code of [plain, sk]) expect(code).not.toMatch(/\/\/ #(if|else|endif)/);
    expect(plain).not.toContain('SKW');
    expect(() => streamKMain('fn main() {}', plain)).toThrow(/main\(\)/);
  });

  it('the LEAN text only for lean choices: every other choice\'s WGSL is the text measured before it', () => {
    for (const [unroll, tn16, sk] of [[0, false, false], [8, true, false], [8, true, true], [16, false, false]] as const) {
      const plain = matmulCode(true, true, true, unroll, tn16, sk);
      const lean = matmulCode(true, true, true, unroll, tn16, sk, true);
      for (const id of ['fn aIndex', 'fn bLoads', 'kOffA', '= loadA4i(']) {
        expect(plain).not.toContain(id);
        expect(lean).toContain(id);
      }
      for (const code of [plain, lean]) expect(code).not.toMatch(/\/\/ #(if|else|endif)/);
      // The LEAN blocks replace the fetches and add helpers; the FMAs, stores and barriers are the same text.
      const fmaBlock = (src: string) => src.slice(src.indexOf('  var c00 = vec4<f32>(0.0);'), src.indexOf('  // Tile 0 into buffer 0.'));
      expect(fmaBlock(lean)).toBe(fmaBlock(plain));
      const after = (src: string) => src.slice(src.lastIndexOf('  let aBase = '));
      expect(after(lean)).toBe(after(plain));
    }
    // The TN 16 text edit and the stream-K branch apply to the LEAN text as to the other.
    expect(matmulCode(true, true, true, 8, true, false, true)).not.toContain('1u - h');
    expect(matmulCode(true, true, true, 8, true, true, true)).toContain('storeRowSK(');
  });

  it('vec4 access only where the stored rows are whole vec4s; one shader per access choice', () => {
    expect(vectorFlags({ M: 65, N: 64, K: 32 })).toEqual({ vecA: true, vecB: true, vecC: true });
    expect(vectorFlags({ M: 65, N: 64, K: 32, transA: true })).toEqual({ vecA: false, vecB: true, vecC: true });
    expect(vectorFlags({ M: 64, N: 65, K: 32, transB: true })).toEqual({ vecA: true, vecB: true, vecC: false });
    expect(vectorFlags({ M: 64, N: 65, K: 32 })).toEqual({ vecA: true, vecB: false, vecC: false });
    const v = matmulCode(true, false, true);
    expect(v).toContain('var<storage, read> A: array<vec4<f32>>');
    expect(v).toContain('var<storage, read> B: array<f32>');
    expect(v).toContain('var<storage, read_write> C: array<vec4<f32>>');
    expect(v.match(/fn loadA4\(/g)).toHaveLength(1);
    expect(shapeKey({ M: 2, N: 3, K: 4, transA: true })).toBe('2x3x4TN');
  });

  it('specialized pipelines get the k loop written out as BK blocks of the same body; dynamic ones keep the loop', () => {
    const looped = matmulCode(true, true, true);
    expect(looped).toContain('for (var k = 0u; k < BK; k++)');
    for (const bk of [8, 16]) {
      const unrolled = matmulCode(true, true, true, bk);
      expect(unrolled).not.toContain('for (var k = 0u');
      expect(unrolled).not.toContain('// unroll');
      expect(unrolled).not.toContain('break;');
      expect(unrolled.match(/let k = \d+u;/g)).toEqual(Array.from({ length: bk }, (_, j) => `let k = ${j}u;`));
      // Every block holds the loop's whole body: its FMAs appear bk times.
      const fmas = (src: string) => src.match(/c00 \+= a0\.x \* b0;/g)?.length ?? 0;
      expect(fmas(unrolled)).toBe(bk * fmas(looped));
    }
    expect(() => unrollKSteps('fn main() {}', 8)).toThrow(/k loop/);
  });

  it('specialized TN 16 tiles index the next tile\'s buffer as (t + 1) % 2, everything else as 1 - h', () => {
    const plain = matmulCode(true, true, true);
    const tn16 = matmulCode(true, true, true, 0, true);
    expect(plain.split('1u - h').length - 1).toBe(6);
    expect(matmulCode(true, true, true, 8, true)).not.toContain('1u - h');
    expect(plain).not.toContain('hn');
    expect(tn16).not.toContain('1u - h');
    expect(tn16.match(/let hn = \(t \+ 1u\) % 2u;/g)).toHaveLength(1);
    expect(tn16.match(/put[AB]\(hn, lid/g)).toHaveLength(4);
    expect(tn16).toContain('let an = hn * A_BUF + ty;');
    // Otherwise the same text.
    expect(tn16.replace('    let hn = (t + 1u) % 2u;\n', '').replaceAll('hn', 'X')).toBe(plain.replaceAll('(1u - h)', 'X').replaceAll('1u - h', 'X'));
    expect(() => nextBufferByModulo('fn main() {}')).toThrow(/buffer index/);
  });
});
