/**
 * The INT8 training-GEMM kernels against their plain-TS references: the transposed block quantizer
 * code for code (nearest and stochastic), the blocked dW GEMM and the accumulating dot4 GEMM bit for
 * bit (integer sums are exact; the references round the epilogue as the kernels do).
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { qgemmI8 } from '../../src/engine/kernels/qgemm/qgemm';
import { columnAbsmaxWords, columnTileRows, qgemmI8Blocked, quantizeColumnsI8, quantizeTransposedI8, setTransposeQuantVariant, TQ_VARIANTS } from '../../src/engine/kernels/qgemm/block';
import { qgemmI8BlockedRef, quantizeTransposedI8Ref } from '../../src/engine/kernels/qgemm/block.ref';
import { qgemmI8ExactRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up, track } = trackBuffers();


describe('quantizeTransposedI8', () => {
  // [R, CN, G]: short blocks (64 columns per workgroup), a partial column tile, a whole column (G = R).
  const cases: [number, number, number, 'nearest' | 'stochastic'][] = [
    [64, 20, 32, 'nearest'], [96, 70, 32, 'stochastic'], [40, 9, 40, 'nearest'], [128, 17, 128, 'stochastic'],
    [600, 5, 600, 'nearest'], // past a staged tile: lanes store their own words
  ];
  // Every variant (staged or not, 1 or 4 words loaded ahead) gives the reference's bits.
  const variants = Object.keys(TQ_VARIANTS);
  it.each(cases.flatMap((c) => variants.map((v) => [...c, v] as const)))('R=%i CN=%i G=%i %s, %s', async (R, CN, G, rounding, variant) => {
    const rt = await testRuntime();
    setTransposeQuantVariant(rt, TQ_VARIANTS[variant]);
    onTestFinished(() => setTransposeQuantVariant(rt, undefined));
    const rng = new Rng(R + CN + G);
    const x = rng.normalArray(R * CN);
    x[5] = 30; // an outlier: its block's scale differs
    for (let c = 0; c < CN; c++) x[(G - 1) * CN + c] *= 0; // a zero row does not zero a block
    if (CN > 3) for (let r = 0; r < G; r++) x[r * CN + 3] = 0; // an all-zero block: s = 0, codes 0
    const codes = track(rt.createBuffer('workspace', 'codes', R * CN));
    const scales = track(rt.createBuffer('workspace', 'scales', (CN * R / G) * 4));
    const k = quantizeTransposedI8(rt, { label: 'tq', x: up(rt, x), R, CN, G, codes, scales, rounding, seed: 7 });
    k.setSeed(11);
    rt.run([k.dispatch]);
    const ref = quantizeTransposedI8Ref(x, R, CN, G, { rounding, seed: 11 });
    expect(Array.from(await rt.readF32(scales, 0, (CN * R) / G))).toEqual(Array.from(ref.scales));
    expect(Array.from(await rt.readU32(codes, 0, (R * CN) / 4))).toEqual(Array.from(ref.words));
  });

  it('rejects a block that does not divide R', async () => {
    const rt = await testRuntime();
    const b = track(rt.createBuffer('workspace', 'b', 64));
    expect(() => quantizeTransposedI8(rt, { label: 'bad', x: b, R: 48, CN: 4, G: 32, codes: b, scales: b })).toThrow(/dividing R=48/);
  });
});

describe('quantizeColumnsI8 (one scale per column over all rows, in row tiles)', () => {
  // [R, CN]: one tile; 75 tiles of 8 rows with a partial column tile; 4 tiles of 256; 3 of 32. CN % 8 == 0
  // (the register-transposed encode under `regs`): rows past the last 256, a partial 32-column tile.
  const cases: [number, number, 'nearest' | 'stochastic'][] = [[64, 20, 'nearest'], [600, 70, 'stochastic'], [1024, 9, 'nearest'], [96, 130, 'stochastic'],
    [600, 72, 'stochastic'], [1024, 40, 'nearest'], [96, 136, 'nearest'], [512, 64, 'stochastic']];
  const variants = Object.keys(TQ_VARIANTS);
  it.each(cases.flatMap((c) => variants.map((v) => [...c, v] as const)))('R=%i CN=%i %s, %s', async (R, CN, rounding, variant) => {
    const rt = await testRuntime();
    setTransposeQuantVariant(rt, TQ_VARIANTS[variant]);
    onTestFinished(() => setTransposeQuantVariant(rt, undefined));
    const rng = new Rng(R + CN);
    const x = rng.normalArray(R * CN);
    x[(R - 3) * CN + 1] = 40; // an outlier in the last tile sets column 1's scale for every tile
    for (let r = 0; r < R; r++) x[r * CN + 3] = 0; // an all-zero column: s = 0, codes 0
    const codes = track(rt.createBuffer('workspace', 'codes', R * CN));
    const scales = track(rt.createBuffer('workspace', 'scales', CN * 4));
    const amax = track(rt.createBuffer('workspace', 'amax', columnAbsmaxWords(R, CN) * 4));
    const k = quantizeColumnsI8(rt, { label: 'cq', x: up(rt, x), R, CN, codes, scales, amax, rounding, seed: 7 });
    k.setSeed(13);
    rt.run(k.dispatches);
    const ref = quantizeTransposedI8Ref(x, R, CN, R, { rounding, seed: 13 });
    expect(Array.from(await rt.readF32(scales, 0, CN))).toEqual(Array.from(ref.scales));
    expect(Array.from(await rt.readU32(codes, 0, (R * CN) / 4))).toEqual(Array.from(ref.words));
  });

  // Quotients within a few ulps of a half-integer: the lanes the division-free codes redo exactly.
  it.each(Object.keys(TQ_VARIANTS))('values at rounding boundaries give the reference codes, %s', async (variant) => {
    const rt = await testRuntime();
    setTransposeQuantVariant(rt, TQ_VARIANTS[variant]);
    onTestFinished(() => setTransposeQuantVariant(rt, undefined));
    const R = 256;
    const CN = 16; // CN % 8 == 0: under `regs` the register-transposed encode
    const x = boundaryColumns(R, CN, new Rng(5));
    const codes = track(rt.createBuffer('workspace', 'codes', R * CN));
    const scales = track(rt.createBuffer('workspace', 'scales', CN * 4));
    const amax = track(rt.createBuffer('workspace', 'amax', columnAbsmaxWords(R, CN) * 4));
    rt.run(quantizeColumnsI8(rt, { label: 'cqb', x: up(rt, x), R, CN, codes, scales, amax }).dispatches);
    const ref = quantizeTransposedI8Ref(x, R, CN, R, { rounding: 'nearest', seed: 0 });
    expect(Array.from(await rt.readU32(codes, 0, (R * CN) / 4))).toEqual(Array.from(ref.words));
  });

  it('tiles of at most 256 rows; rows not a multiple of 4 are rejected', () => {
    expect([64, 600, 1024, 8192, 96].map(columnTileRows)).toEqual([64, 8, 256, 256, 32]);
    expect(() => columnTileRows(30)).toThrow(/R=30 must be a positive multiple of 4/);
  });
});

/** x [R, CN]: column c's absmax A_c in row 0, every other row a value within ±3 ulps of (n + ½)·s_c. */
function boundaryColumns(R: number, CN: number, rng: Rng): Float32Array {
  const x = new Float32Array(R * CN);
  const bits = new Uint32Array(x.buffer);
  for (let c = 0; c < CN; c++) {
    const a = Math.fround(0.37 + 1.9 * c + rng.next());
    const sc = Math.fround(a / 127);
    x[c] = c % 2 ? -a : a;
    for (let r = 1; r < R; r++) {
      const n = rng.int(254) - 127; // -127 .. 126: (n + ½) within ±127.5
      const i = r * CN + c;
      x[i] = Math.fround((n + 0.5) * sc);
      if (x[i] !== 0) bits[i] += rng.int(7) - 3;
      if (Math.abs(x[i]) > a) x[i] = Math.sign(x[i]) * a;
    }
  }
  return x;
}

function randI8(n: number, rng: Rng): { v: Int8Array; words: Uint32Array } {
  const v = Int8Array.from({ length: n }, () => (rng.nextU32() >>> 24) - 128);
  return { v, words: new Uint32Array(v.buffer.slice(0)) };
}

describe('qgemmI8Blocked (dW with per-block scales along K)', () => {
  const cases: [number, number, number, number, boolean][] = [[7, 65, 64, 32, false], [66, 9, 192, 64, true], [3, 5, 256, 256, false]];
  it.each(cases)('M=%i N=%i K=%i G=%i accumulate=%s', async (M, N, K, G, accumulate) => {
    const rt = await testRuntime();
    const rng = new Rng(M * N + K);
    const A = randI8(M * K, rng);
    const B = randI8(N * K, rng);
    const sa = Float32Array.from({ length: (M * K) / G }, () => 0.001 + rng.next() * 0.01);
    const sb = Float32Array.from({ length: (N * K) / G }, () => 0.001 + rng.next() * 0.01);
    const c0 = rng.normalArray(M * N);
    const c = up(rt, c0);
    rt.run([qgemmI8Blocked(rt, { label: 'qb', aq: up(rt, A.words), sa: up(rt, sa), bq: up(rt, B.words), sb: up(rt, sb), c, M, N, K, G, accumulate })]);
    const want = qgemmI8BlockedRef(A.v, sa, B.v, sb, M, N, K, G, accumulate ? c0 : undefined);
    const got = await rt.readF32(c, 0, M * N);
    let bad = 0;
    for (let i = 0; i < want.length; i++) if (Math.abs(got[i] - want[i]) > 1e-6 * Math.abs(want[i]) + 1e-30) bad++;
    expect(bad, 'elements off by more than f32 contraction').toBe(0);
  });
});

describe('qgemmI8 accumulate', () => {
  it('C += diag(sx)·QX·QWᵀ·diag(sw), the product as without accumulate', async () => {
    const rt = await testRuntime();
    const [M, N, K] = [9, 70, 36];
    const rng = new Rng(3);
    const X = randI8(M * K, rng);
    const W = randI8(N * K, rng);
    const sx = Float32Array.from({ length: M }, () => 0.01 + rng.next() * 0.01);
    const sw = Float32Array.from({ length: N }, () => 0.01 + rng.next() * 0.01);
    const c0 = rng.normalArray(M * N);
    const c = up(rt, c0);
    rt.run([qgemmI8(rt, { label: 'acc', xq: up(rt, X.words), sx: up(rt, sx), wq: up(rt, W.words), sw: up(rt, sw), c, M, N, K, accumulate: true, tiles: { BK: 4 } })]);
    const prod = qgemmI8ExactRef(X.v, sx, W.v, sw, M, N, K);
    const got = await rt.readF32(c, 0, M * N);
    expect(Array.from(got)).toEqual(Array.from(prod, (p, i) => Math.fround(c0[i] + p)));
  });
});


