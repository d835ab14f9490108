import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeScalar, QMAX, QUANT_FORMATS, type QuantFormat } from '../../src/engine/quant/formats';
import { codeBytes, packCodes, unpackCodes } from '../../src/engine/quant/pack';
import {
  dequantizeRef,
  type Granularity,
  numScales,
  payloadBytes,
  quantizeRef,
  SCALE_TINY,
  scaleIndex,
} from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';

describe('packCodes / unpackCodes', () => {
  it('puts element i at bits 8·(i%4) / 4·(i%8), little end first, zero-padded', () => {
    expect([...packCodes([1, 2, 3, 4, 5], 8)]).toEqual([0x04030201, 0x05]);
    expect([...packCodes([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)]).toEqual([0x87654321, 0x9]);
    expect([...packCodes([0xff, 0x80], 8)]).toEqual([0x80ff]);
    expect([...codeBytes(packCodes([1, 2, 3, 4, 5], 8), 5, 8)]).toEqual([1, 2, 3, 4, 5]);
    expect([...codeBytes(packCodes([1, 2, 3], 4), 3, 4)]).toEqual([0x21, 0x03]);
  });

  it.each([8, 4] as const)('%i-bit: unpack(pack(c)) = c, tails padded with zeros (fast-check)', (bits) => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: (1 << bits) - 1 }), { maxLength: 70 }), (codes) => {
        const w = packCodes(codes, bits);
        const per = 32 / bits;
        if (w.length !== Math.ceil(codes.length / per)) return false;
        if (!unpackCodes(w, codes.length, bits).every((c, i) => c === codes[i])) return false;
        // Every slot past the end is zero.
        const all = unpackCodes(w, w.length * per, bits);
        return all.slice(codes.length).every((c) => c === 0);
      }),
    );
  });

  it('masks codes to their width and rejects too few words', () => {
    expect([...unpackCodes(packCodes([0x1f, -1], 4), 2, 4)]).toEqual([0xf, 0xf]);
    expect(() => unpackCodes(new Uint32Array(1), 5, 8)).toThrow(/fewer/);
  });
});

const GRANS: Granularity[] = [
  { kind: 'tensor' },
  { kind: 'row', rowLength: 12 },
  { kind: 'column', rowLength: 12 },
  { kind: 'group', size: 32 },
  { kind: 'group', size: 7 },
];

describe('quantizeRef / dequantizeRef', () => {
  it('scale index and count per granularity', () => {
    expect(numScales({ kind: 'group', size: 32 }, 65)).toBe(3);
    expect(numScales({ kind: 'row', rowLength: 5 }, 20)).toBe(4);
    expect(numScales({ kind: 'column', rowLength: 5 }, 20)).toBe(5);
    expect(scaleIndex({ kind: 'column', rowLength: 5 }, 13)).toBe(3);
    expect(scaleIndex({ kind: 'row', rowLength: 5 }, 13)).toBe(2);
    expect(() => quantizeRef(new Float32Array(10), 'int8', { kind: 'row', rowLength: 3 })).toThrow(/whole rows/);
    expect(() => quantizeRef(new Float32Array(10), 'int8', { kind: 'group', size: 0 })).toThrow(/positive integer/);
  });

  it.each(QUANT_FORMATS)('%s: s = fp32(absmax/QMAX) per group; the absmax element decodes to ±absmax', (fmt) => {
    const x = new Rng(5).normalArray(96, 3);
    for (const g of GRANS) {
      const q = quantizeRef(x, fmt, g);
      const amax = new Float64Array(numScales(g, x.length));
      for (let i = 0; i < x.length; i++) amax[scaleIndex(g, i)] = Math.max(amax[scaleIndex(g, i)], Math.abs(x[i]));
      expect([...q.scales]).toEqual([...amax].map((a) => Math.fround(a / QMAX[fmt])));
      const xh = dequantizeRef(q);
      for (let i = 0; i < x.length; i++) {
        if (Math.abs(x[i]) === amax[scaleIndex(g, i)]) expect(Math.abs(xh[i] - x[i])).toBeLessThanOrEqual(Math.abs(x[i]) * 2 ** -22);
      }
    }
  });

  it('exact ties round to even through the quantizer (s = 1 when absmax = QMAX)', () => {
    const e4 = quantizeRef([448, 1.0625, 1.1875, -1.0625, 2 ** -10, 3 * 2 ** -10], 'fp8-e4m3', { kind: 'tensor' });
    expect(e4.scales[0]).toBe(1);
    expect([...dequantizeRef(e4)]).toEqual([448, 1, 1.25, -1, 0, 2 ** -8]);
    const i4 = quantizeRef([7, 2.5, 3.5, -2.5, 0.5, -6.5], 'int4', { kind: 'tensor' });
    expect([...dequantizeRef(i4)]).toEqual([7, 2, 4, -2, 0, -6]);
    const i8 = quantizeRef([127, 0.5, 1.5, -126.5], 'int8', { kind: 'tensor' });
    expect([...dequantizeRef(i8)]).toEqual([127, 0, 2, -126]);
  });

  it.each(QUANT_FORMATS)('%s: zero and tiny groups decode to zeros with s = 0; NaN/Inf become 0', (fmt) => {
    const x = new Float32Array(40);
    x.fill(1e-36, 8, 16); // below SCALE_TINY: a zero group
    x[17] = NaN;
    x[18] = -Infinity;
    x[19] = 3;
    x[20] = -2;
    const q = quantizeRef(x, fmt, { kind: 'group', size: 8 });
    expect([...q.scales]).toEqual([0, 0, Math.fround(3 / QMAX[fmt]), 0, 0]);
    const xh = dequantizeRef(q);
    expect(xh.slice(0, 16).every((v) => v === 0)).toBe(true);
    expect(xh[17]).toBe(0);
    expect(xh[18]).toBe(0);
    expect(xh[19]).toBe(3);
    expect(unpackCodes(q.words, 40, fmt === 'int4' ? 4 : 8).slice(0, 19).every((c) => c === 0)).toBe(true);
    expect(SCALE_TINY).toBe(2 ** -110);
  });

  it.each(QUANT_FORMATS)('%s: partial last group and odd tails (n = 1, 7, 65)', (fmt) => {
    for (const n of [1, 7, 65]) {
      const x = new Rng(n).normalArray(n);
      const q = quantizeRef(x, fmt, { kind: 'group', size: 32 });
      expect(q.scales.length).toBe(Math.ceil(n / 32));
      expect(q.words.length).toBe(Math.ceil(n / (fmt === 'int4' ? 8 : 4)));
      // Padding slots hold code 0.
      const per = fmt === 'int4' ? 8 : 4;
      const all = unpackCodes(q.words, q.words.length * per, fmt === 'int4' ? 4 : 8);
      expect(all.slice(n).every((c) => c === 0)).toBe(true);
      expect(dequantizeRef(q).length).toBe(n);
    }
  });

  it.each(QUANT_FORMATS)('%s: error bound per element, every granularity (fast-check)', (fmt) => {
    fc.assert(
      fc.property(
        fc.array(fc.float({ min: -1e6, max: 1e6, noNaN: true }), { minLength: 1, maxLength: 48 }),
        fc.constantFrom(...GRANS.filter((g) => g.kind === 'tensor' || g.kind === 'group')),
        (arr, g) => {
          const q = quantizeRef(arr, fmt, g);
          const xh = dequantizeRef(q);
          return arr.every((x, i) => Math.abs(xh[i] - x) <= bound(fmt, x, q.scales[scaleIndex(g, i)]));
        },
      ),
      { numRuns: 200 },
    );
  });

  it('payload bytes: codes + 4 per scale', () => {
    expect(payloadBytes('int4', 7, 1)).toBe(8);
    expect(payloadBytes('fp8-e4m3', 256, 2)).toBe(264);
  });
});

describe('stochastic rounding quantizer', () => {
  const x = new Rng(11).normalArray(300, 2);

  it.each(QUANT_FORMATS)('%s: reproducible from the seed, different across seeds', (fmt) => {
    const g: Granularity = { kind: 'group', size: 64 };
    const a = quantizeRef(x, fmt, g, { rounding: 'stochastic', seed: 42 });
    const b = quantizeRef(x, fmt, g, { rounding: 'stochastic', seed: 42 });
    const c = quantizeRef(x, fmt, g, { rounding: 'stochastic', seed: 43 });
    expect([...a.words]).toEqual([...b.words]);
    expect([...a.words]).not.toEqual([...c.words]);
    expect([...a.scales]).toEqual([...c.scales]);
  });

  it.each(QUANT_FORMATS)('%s: unbiased — the mean over seeds converges to x', (fmt) => {
    const g: Granularity = { kind: 'row', rowLength: 100 };
    const seeds = 400;
    const mean = new Float64Array(x.length);
    for (let seed = 0; seed < seeds; seed++) {
      const xh = dequantizeRef(quantizeRef(x, fmt, g, { rounding: 'stochastic', seed }));
      for (let i = 0; i < x.length; i++) mean[i] += xh[i] / seeds;
    }
    const near = dequantizeRef(quantizeRef(x, fmt, g));
    let biasSR = 0;
    let tooFar = 0;
    for (let i = 0; i < x.length; i++) {
      const s = quantizeRef(x, fmt, g).scales[scaleIndex(g, i)];
      // One element: |mean − x| ≤ 5·step/(2√seeds); the step is ≤ 2·bound.
      const step = 2 * bound(fmt, x[i], s);
      if (Math.abs(mean[i] - x[i]) > (5 * step) / (2 * Math.sqrt(seeds))) tooFar++;
      biasSR += mean[i] - x[i];
    }
    expect(tooFar).toBe(0);
    // The average signed error over the tensor is far below round-to-nearest's typical error.
    const rtnAbs = near.reduce((a, v, i) => a + Math.abs(v - x[i]), 0) / x.length;
    expect(Math.abs(biasSR / x.length)).toBeLessThan(rtnAbs / 5);
  });
});

/** Per-element RTN bound: INT |e| ≤ s/2; FP8 |e| ≤ 2^-(m+1)|x| (normal range), half a subnormal step below. */
function bound(fmt: QuantFormat, x: number, s: number): number {
  if (s === 0) return SCALE_TINY; // a (near-)zero group decodes to zeros
  const slack = Math.abs(x) * 2 ** -22 + s * 2 ** -20;
  if (fmt === 'int8' || fmt === 'int4') return s / 2 + slack;
  const [m, minSub] = fmt === 'fp8-e4m3' ? [3, 2 ** -9] : [2, 2 ** -16];
  return Math.max(Math.abs(x) * 2 ** -(m + 1), (minSub * s) / 2) + slack;
}

// decodeScalar is part of the contract the dequantizer composes with the scale.
it('dequantizeRef = decodeScalar(code) · s in fp32', () => {
  const x = new Rng(3).normalArray(20);
  const q = quantizeRef(x, 'fp8-e5m2', { kind: 'group', size: 8 });
  const codes = unpackCodes(q.words, 20, 8);
  const xh = dequantizeRef(q);
  for (let i = 0; i < 20; i++) expect(xh[i]).toBe(Math.fround(decodeScalar('fp8-e5m2', codes[i]) * q.scales[(i / 8) | 0]));
});
