import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  availableVariants, chooseMatmulVariant, getVariant, MATMUL_VARIANTS, matmulCode, shapeKey, variantFits,
  variantIsWellFormed, variantSharedBytes, variantThreads, vectorFlags,
} from '../../src/engine/kernels/matmul';
import { matmulRef, transposeRef } from '../../src/engine/kernels/matmul.ref';
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
      expect(v.name).toBe(`${v.BM}x${v.BN}k${v.BK}_${v.TM}x${v.TN}`);
      expect(variantThreads(v)).toBeLessThanOrEqual(256);
      expect(variantFits(v, H200_LIKE), v.name).toBe(true);
    }
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
    expect(chooseMatmulVariant({ M: 4096, N: 4096, K: 4096 }, H200_LIKE)).toBe('128x128k16_8x8');
    expect(chooseMatmulVariant({ M: 16384, N: 3072, K: 768, transB: true }, H200_LIKE)).toBe('128x128k16_8x8');
    expect(chooseMatmulVariant({ M: 16384, N: 65, K: 768, transB: true }, H200_LIKE)).toBe('128x32k16_8x4');
    expect(getVariant(chooseMatmulVariant({ M: 1, N: 1, K: 1 }, H200_LIKE)).BM).toBeLessThanOrEqual(64);
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
    expect(v.match(/fn loadA4/g)).toHaveLength(1);
    expect(shapeKey({ M: 2, N: 3, K: 4, transA: true })).toBe('2x3x4TN');
  });
});
