import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeE4M3, decodeE5M2, E4M3, E5M2, encodeE4M3, encodeE5M2 } from '../../src/engine/quant/fp8';
import {
  decodeInt4,
  decodeInt8,
  decodeScalar,
  encodeInt,
  encodeScalar,
  QMAX,
  QUANT_FORMATS,
  type QuantFormat,
} from '../../src/engine/quant/formats';
import { srBits, srUniform } from '../../src/engine/quant/sr';

const FP8 = [
  { name: 'E4M3', f: E4M3, enc: encodeE4M3, dec: decodeE4M3 },
  { name: 'E5M2', f: E5M2, enc: encodeE5M2, dec: decodeE5M2 },
] as const;

/**
 * Independent oracle: nearest same-sign finite code by brute force, ties to the even code; beyond
 * ±max it saturates (there, double errors |d − x| would all round to |x| and tie).
 */
function oracle(dec: (c: number) => number, x: number): number {
  const neg = x < 0 || Object.is(x, -0);
  const maxCode = Number.isFinite(dec(0x7c)) ? 0x7e : 0x7b;
  if (Math.abs(x) >= dec(maxCode)) return (neg ? 0x80 : 0) | maxCode;
  let best = -1;
  let bestErr = Infinity;
  for (let c = neg ? 0x80 : 0; c < (neg ? 0x100 : 0x80); c++) {
    const d = dec(c);
    if (!Number.isFinite(d)) continue;
    const err = Math.abs(d - x);
    if (err < bestErr || (err === bestErr && (c & 1) === 0)) {
      best = c;
      bestErr = err;
    }
  }
  return best;
}

/** fp32 neighbours of a double (rounded to fp32 first). */
function f32Neighbours(x: number): number[] {
  const b = new Float32Array([x]);
  const u = new Uint32Array(b.buffer);
  const out = [b[0]];
  const bits = u[0];
  for (const d of [-1, 1]) {
    u[0] = bits + d;
    if (Number.isFinite(b[0])) out.push(b[0]);
  }
  return out;
}

function finiteCodes(dec: (c: number) => number): number[] {
  return [...Array(256).keys()].filter((c) => Number.isFinite(dec(c)));
}

describe('FP8 decode tables', () => {
  it('E4M3: known values, NaN codes, no infinities', () => {
    expect(decodeE4M3(0x38)).toBe(1);
    expect(decodeE4M3(0x7e)).toBe(448);
    expect(decodeE4M3(0xfe)).toBe(-448);
    expect(decodeE4M3(0x08)).toBe(2 ** -6);
    expect(decodeE4M3(0x01)).toBe(2 ** -9);
    expect(decodeE4M3(0x07)).toBe(7 * 2 ** -9);
    expect(Object.is(decodeE4M3(0x80), -0)).toBe(true);
    const nans = [...Array(256).keys()].filter((c) => Number.isNaN(decodeE4M3(c)));
    expect(nans).toEqual([0x7f, 0xff]);
    expect([...Array(256).keys()].some((c) => !Number.isFinite(decodeE4M3(c)) && !Number.isNaN(decodeE4M3(c)))).toBe(false);
  });

  it('E5M2: known values, infinities, NaN codes', () => {
    expect(decodeE5M2(0x3c)).toBe(1);
    expect(decodeE5M2(0x7b)).toBe(57344);
    expect(decodeE5M2(0x04)).toBe(2 ** -14);
    expect(decodeE5M2(0x01)).toBe(2 ** -16);
    expect(decodeE5M2(0x7c)).toBe(Infinity);
    expect(decodeE5M2(0xfc)).toBe(-Infinity);
    const nans = [...Array(256).keys()].filter((c) => Number.isNaN(decodeE5M2(c)));
    expect(nans).toEqual([0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff]);
  });

  it.each(FP8)('$name: positive codes are strictly increasing, negative codes mirror them', ({ f, dec }) => {
    for (let c = 1; c <= f.maxCode; c++) expect(dec(c)).toBeGreaterThan(dec(c - 1));
    for (let c = 0; c <= f.maxCode; c++) expect(dec(c | 0x80)).toBe(-dec(c));
    expect(dec(f.maxCode)).toBe(f.max);
  });
});

describe('FP8 encode', () => {
  it.each(FP8)('$name: all 256 codes round-trip (NaN → canonical NaN, E5M2 ±Inf saturates)', ({ f, enc, dec }) => {
    let finite = 0;
    for (let c = 0; c < 256; c++) {
      const d = dec(c);
      if (Number.isNaN(d)) expect(enc(d)).toBe(0x7f);
      else if (!Number.isFinite(d)) expect(enc(d)).toBe((c & 0x80) | f.maxCode);
      else {
        expect(enc(d), `code 0x${c.toString(16)}`).toBe(c);
        finite++;
      }
    }
    expect(finite).toBe(f.hasInf ? 256 - 8 : 254);
  });

  it.each(FP8)('$name: every midpoint ties to even, fp32 neighbours go to the nearest', ({ f, enc, dec }) => {
    const codes = finiteCodes(dec).filter((c) => (c & 0x7f) < f.maxCode);
    for (const c of codes) {
      const mid = (dec(c) + dec(c + 1)) / 2; // exact: both lie on a power-of-two grid
      const even = (c & 1) === 0 ? c : c + 1;
      expect(enc(mid), `midpoint after 0x${c.toString(16)}`).toBe(even);
      for (const v of f32Neighbours(mid)) expect(enc(v)).toBe(oracle(dec, v));
    }
  });

  it.each(FP8)('$name: saturates at ±max, keeps the sign of zero, NaN → 0x7F', ({ f, enc }) => {
    expect(enc(f.max)).toBe(f.maxCode);
    expect(enc(f.max * 1.01)).toBe(f.maxCode);
    expect(enc(1e30)).toBe(f.maxCode);
    expect(enc(-1e30)).toBe(0x80 | f.maxCode);
    expect(enc(Infinity)).toBe(f.maxCode);
    expect(enc(-Infinity)).toBe(0x80 | f.maxCode);
    expect(enc(0)).toBe(0);
    expect(enc(-0)).toBe(0x80);
    expect(enc(-1e-30)).toBe(0x80);
    expect(enc(NaN)).toBe(0x7f);
  });

  it.each(FP8)('$name: matches the brute-force oracle on random fp32 values (fast-check)', ({ enc, dec }) => {
    fc.assert(
      fc.property(fc.float({ noNaN: true, noDefaultInfinity: true }), (x) => enc(x) === oracle(dec, x)),
      { numRuns: 3000 },
    );
    // Concentrated on the formats' own range, where the rounding decisions are.
    fc.assert(
      fc.property(fc.float({ min: Math.fround(-70000), max: Math.fround(70000), noNaN: true }), (x) => enc(x) === oracle(dec, x)),
      { numRuns: 3000 },
    );
  });
});

describe('INT8 / INT4', () => {
  it('all 16 INT4 and all 256 INT8 codes round-trip', () => {
    for (let c = 0; c < 16; c++) expect(encodeInt(decodeInt4(c), 7)).toBe(c);
    for (let c = 0; c < 256; c++) expect(encodeInt(decodeInt8(c), 127)).toBe(c);
    expect([...Array(16).keys()].map(decodeInt4)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1]);
  });

  it('rounds half to even and saturates', () => {
    const i4 = (v: number) => decodeInt4(encodeInt(v, 7));
    expect([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 6.5].map(i4)).toEqual([0, 2, 2, 4, 0, -2, -2, 6]);
    expect(i4(7.49)).toBe(7);
    expect(i4(100)).toBe(7);
    expect(i4(-100)).toBe(-8);
    expect(decodeInt8(encodeInt(126.5, 127))).toBe(126);
    expect(decodeInt8(encodeInt(1e9, 127))).toBe(127);
  });

  it('fast-check: nearest integer within range, error ≤ ½', () => {
    fc.assert(
      fc.property(fc.double({ min: -7.5, max: 7.5, noNaN: true }), (v) => Math.abs(decodeInt4(encodeInt(v, 7)) - v) <= 0.5),
    );
  });
});

describe('encodeScalar / decodeScalar', () => {
  it.each(QUANT_FORMATS)('%s: non-finite values encode to 0, in-range values round-trip through the grid', (fmt) => {
    for (const v of [NaN, Infinity, -Infinity]) {
      expect(encodeScalar(fmt, v)).toBe(0);
      expect(encodeScalar(fmt, v, { u: 0.5 })).toBe(0);
    }
    expect(decodeScalar(fmt, encodeScalar(fmt, QMAX[fmt]))).toBe(QMAX[fmt]);
    expect(decodeScalar(fmt, encodeScalar(fmt, -QMAX[fmt]))).toBe(-QMAX[fmt]);
    expect(decodeScalar(fmt, encodeScalar(fmt, 2 * QMAX[fmt]))).toBe(QMAX[fmt]);
  });
});

describe('stochastic rounding', () => {
  it('srUniform is in (0,1), exact on the (k+½)·2^-23 grid, and roughly uniform', () => {
    const bins = new Array(10).fill(0);
    const n = 20000;
    for (let i = 0; i < n; i++) {
      const u = srUniform(123, i);
      expect(u > 0 && u < 1).toBe(true);
      expect(Math.fround(u)).toBe(u);
      bins[Math.floor(u * 10)]++;
    }
    for (const b of bins) expect(Math.abs(b - n / 10)).toBeLessThan(5 * Math.sqrt(n / 10));
    expect(srBits(1, 0)).not.toBe(srBits(2, 0));
    expect(srBits(1, 0)).not.toBe(srBits(1, 1));
  });

  // (format, value): subnormal, normal, near max, negative, and integer grids.
  const cases: [QuantFormat, number][] = [
    ['fp8-e4m3', 1.03],
    ['fp8-e4m3', -0.0071],
    ['fp8-e4m3', 300.7],
    ['fp8-e5m2', 3.3e-5],
    ['fp8-e5m2', -1234.5],
    ['int8', 3.3],
    ['int8', -126.2],
    ['int4', -2.75],
    ['int4', 6.1],
  ];

  it.each(cases)('%s: SR of %f is unbiased and only lands on the two neighbours', (fmt, v0) => {
    const v = Math.fround(v0);
    const n = 40000;
    let sum = 0;
    const seen = new Set<number>();
    for (let i = 0; i < n; i++) {
      const d = decodeScalar(fmt, encodeScalar(fmt, v, { u: srUniform(7, i) }));
      seen.add(d);
      sum += d;
    }
    expect(seen.size).toBe(2);
    const [lo, hi] = [...seen].sort((a, b) => a - b);
    expect(lo < v && v < hi).toBe(true);
    // Binomial: std of the mean = (hi − lo)·sqrt(p(1−p)/n) ≤ (hi − lo)/(2√n).
    expect(Math.abs(sum / n - v)).toBeLessThan((5 * (hi - lo)) / (2 * Math.sqrt(n)));
  });

  it('grid values are never moved; the up-probability is the fraction (u just below/above it)', () => {
    for (const fmt of QUANT_FORMATS) {
      for (const u of [1e-7, 0.5, 0.9999999]) {
        expect(decodeScalar(fmt, encodeScalar(fmt, 1, { u }))).toBe(1);
        expect(decodeScalar(fmt, encodeScalar(fmt, -2, { u }))).toBe(-2);
      }
    }
    // 1.25 in int8 has fraction 0.25: rounds up (magnitude) iff u < 0.25.
    expect(decodeInt8(encodeScalar('int8', 1.25, { u: 0.2499 }))).toBe(2);
    expect(decodeInt8(encodeScalar('int8', 1.25, { u: 0.2501 }))).toBe(1);
    expect(decodeInt8(encodeScalar('int8', -1.25, { u: 0.2499 }))).toBe(-2);
    // E4M3 at 1.0 has step 1/8: 1.03125 = 1 + 0.25 step.
    expect(decodeE4M3(encodeScalar('fp8-e4m3', 1.03125, { u: 0.2499 }))).toBe(1.125);
    expect(decodeE4M3(encodeScalar('fp8-e4m3', 1.03125, { u: 0.2501 }))).toBe(1);
  });

  it('saturates out-of-range values instead of rounding past max', () => {
    expect(decodeE4M3(encodeScalar('fp8-e4m3', 500, { u: 1e-7 }))).toBe(448);
    expect(decodeE5M2(encodeScalar('fp8-e5m2', -1e6, { u: 1e-7 }))).toBe(-57344);
    expect(decodeInt4(encodeScalar('int4', 7.9, { u: 1e-7 }))).toBe(7);
  });
});
