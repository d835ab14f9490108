import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  F16_MAX, F16_MIN_NORMAL, F16_MIN_SUBNORMAL, f16ArrayToF32, f16BitsToF32, f32ArrayToF16, f32ToF16Bits, roundF16, roundF16Array,
} from '../../src/engine/quant/f16';

/**
 * Independent reference, by arithmetic on numbers rather than bits: the value rounded to f32, then
 * to the f16 grid of its binade (spacing 2^(e−10), 2^-24 below 2^-14) with ties to an even
 * multiple; from 65520 up, infinity.
 */
function refRound(x: number): number {
  const v = Math.fround(x);
  if (Number.isNaN(v)) return NaN;
  const s = v < 0 || Object.is(v, -0) ? -1 : 1;
  const a = Math.abs(v);
  if (a >= 65520) return s * Infinity;
  let ulp = F16_MIN_SUBNORMAL;
  if (a >= F16_MIN_NORMAL) {
    let e = Math.floor(Math.log2(a));
    while (2 ** e > a) e--;
    while (2 ** (e + 1) <= a) e++;
    ulp = 2 ** (e - 10);
  }
  const q = a / ulp; // exact: a is an f32, ulp a power of two
  let n = Math.floor(q);
  const frac = q - n;
  if (frac > 0.5 || (frac === 0.5 && n % 2 === 1)) n++;
  return s * n * ulp;
}

/** The f32 just above / below a positive f32 (by bits, so the test does not reuse the module). */
function f32Next(x: number, dir: 1 | -1): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] += dir;
  return f[0];
}

const same = (a: number, b: number) => Object.is(a, b) || (Number.isNaN(a) && Number.isNaN(b));

describe('f16 emulation', () => {
  it('decodes every one of the 65,536 codes and encodes each back to itself (NaNs to a NaN)', () => {
    let nans = 0;
    for (let h = 0; h < 0x10000; h++) {
      const v = f16BitsToF32(h);
      const exp = (h >> 10) & 0x1f;
      if (exp === 0x1f && h & 0x3ff) {
        expect(Number.isNaN(v)).toBe(true);
        expect(Number.isNaN(f16BitsToF32(f32ToF16Bits(v)))).toBe(true);
        nans++;
        continue;
      }
      expect(Math.fround(v)).toBe(v); // every f16 is an f32
      if (f32ToF16Bits(v) !== h) throw new Error(`code ${h.toString(16)} (${v}) encodes to ${f32ToF16Bits(v).toString(16)}`);
    }
    expect(nans).toBe(2 * 1023);
  });

  it('orders the codes: positive codes increase with value, negative ones mirror them', () => {
    let prev = -Infinity;
    for (let h = 0; h <= 0x7c00; h++) {
      const v = f16BitsToF32(h);
      if (!(v > prev)) throw new Error(`code ${h.toString(16)}: ${v} is not above ${prev}`);
      prev = v;
      expect(Object.is(f16BitsToF32(h | 0x8000), -v)).toBe(true);
    }
    expect(f16BitsToF32(0x7bff)).toBe(F16_MAX);
    expect(f16BitsToF32(0x0001)).toBe(F16_MIN_SUBNORMAL);
    expect(f16BitsToF32(0x0400)).toBe(F16_MIN_NORMAL);
    expect(f16BitsToF32(0x3c00)).toBe(1);
  });

  it('rounds every midpoint between neighbouring finite codes to the even one, and its f32 neighbours away from it', () => {
    for (let h = 0; h < 0x7bff; h++) {
      const lo = f16BitsToF32(h);
      const hi = f16BitsToF32(h + 1);
      const mid = (lo + hi) / 2; // 12 significant bits: an exact f32
      expect(Math.fround(mid)).toBe(mid);
      const even = h % 2 === 0 ? h : h + 1;
      if (f32ToF16Bits(mid) !== even) throw new Error(`midpoint ${mid} of ${h.toString(16)}: got ${f32ToF16Bits(mid).toString(16)}`);
      if (f32ToF16Bits(f32Next(mid, -1)) !== h) throw new Error(`just below midpoint ${mid}`);
      if (f32ToF16Bits(f32Next(mid, 1)) !== h + 1) throw new Error(`just above midpoint ${mid}`);
      expect(f32ToF16Bits(-mid)).toBe(even | 0x8000);
    }
  });

  it('overflows past 65504 at the round-to-nearest-even boundary 65520', () => {
    expect(roundF16(65504)).toBe(65504);
    expect(roundF16(65519.99)).toBe(65504);
    expect(roundF16(f32Next(65520, -1))).toBe(65504);
    expect(roundF16(65520)).toBe(Infinity); // the tie goes to the even code, 0x7c00 = inf
    expect(roundF16(-65520)).toBe(-Infinity);
    expect(roundF16(1e6)).toBe(Infinity);
    expect(roundF16(3.4e38)).toBe(Infinity);
    expect(roundF16(1e39)).toBe(Infinity); // inf already as an f32
    expect(f32ToF16Bits(Infinity)).toBe(0x7c00);
    expect(f32ToF16Bits(-Infinity)).toBe(0xfc00);
  });

  it('rounds into and out of the subnormals', () => {
    expect(roundF16(F16_MIN_SUBNORMAL)).toBe(F16_MIN_SUBNORMAL);
    expect(roundF16(2 ** -25)).toBe(0); // a tie between 0 and 2^-24: even is 0
    expect(Object.is(roundF16(-(2 ** -25)), -0)).toBe(true);
    expect(roundF16(f32Next(2 ** -25, 1))).toBe(F16_MIN_SUBNORMAL);
    expect(roundF16(1.5 * 2 ** -24)).toBe(2 * 2 ** -24); // tie to even (2)
    expect(roundF16(2.5 * 2 ** -24)).toBe(2 * 2 ** -24);
    expect(roundF16(1e-10)).toBe(0);
    expect(roundF16(1e-45)).toBe(0); // an f32 subnormal
    // Just below the smallest normal rounds up into it (the carry out of the subnormal mantissa).
    expect(roundF16(F16_MIN_NORMAL - 2 ** -26)).toBe(F16_MIN_NORMAL);
    expect(roundF16(F16_MIN_NORMAL - 2 ** -24)).toBe(F16_MIN_NORMAL - 2 ** -24);
  });

  it('keeps NaN, infinities and signed zeros', () => {
    expect(Number.isNaN(roundF16(NaN))).toBe(true);
    expect((f32ToF16Bits(NaN) & 0x7c00) === 0x7c00 && (f32ToF16Bits(NaN) & 0x3ff) !== 0).toBe(true);
    expect(roundF16(Infinity)).toBe(Infinity);
    expect(roundF16(-Infinity)).toBe(-Infinity);
    expect(Object.is(roundF16(-0), -0)).toBe(true);
    expect(f32ToF16Bits(0)).toBe(0);
    expect(f32ToF16Bits(-0)).toBe(0x8000);
  });

  it('rounds through f32 first, as the GPU converts (double rounding of f64 inputs)', () => {
    // 1 + 2^-11 + 2^-40: nearer to 1 + 2^-10 in f64, but f32 drops the 2^-40 first and the tie goes to 1.
    const x = 1 + 2 ** -11 + 2 ** -40;
    expect(Math.fround(x)).toBe(1 + 2 ** -11);
    expect(roundF16(x)).toBe(1);
  });

  it('matches the arithmetic reference on any double (fast-check)', () => {
    fc.assert(fc.property(fc.double(), (x) => same(roundF16(x), refRound(x))), { numRuns: 20000 });
    fc.assert(fc.property(fc.double({ min: -70000, max: 70000, noNaN: true }), (x) => same(roundF16(x), refRound(x))), { numRuns: 20000 });
    fc.assert(fc.property(fc.double({ min: -1e-3, max: 1e-3, noNaN: true }), (x) => same(roundF16(x), refRound(x))), { numRuns: 20000 });
    // Any f32 bit pattern.
    fc.assert(fc.property(fc.integer({ min: 0, max: 0xffffffff }), (bits) => {
      const x = new Float32Array(new Uint32Array([bits]).buffer)[0];
      return same(roundF16(x), refRound(x));
    }), { numRuns: 50000 });
  });

  it('is monotone and idempotent, and its error is at most half a spacing (fast-check)', () => {
    fc.assert(fc.property(fc.double({ min: -65000, max: 65000, noNaN: true }), fc.double({ min: -65000, max: 65000, noNaN: true }), (a, b) => {
      const [lo, hi] = a <= b ? [a, b] : [b, a];
      return roundF16(lo) <= roundF16(hi);
    }));
    fc.assert(fc.property(fc.double({ min: -65504, max: 65504, noNaN: true }), (x) => {
      const r = roundF16(x);
      if (roundF16(r) !== r) return false;
      const a = Math.abs(Math.fround(x));
      const spacing = a < F16_MIN_NORMAL ? F16_MIN_SUBNORMAL : 2 ** (Math.floor(Math.log2(a)) - 10);
      return Math.abs(r - Math.fround(x)) <= spacing / 2 * (1 + 1e-12);
    }));
  });

  it('converts arrays both ways', () => {
    const x = new Float32Array([0, -0, 1, -2.5, 65504, 70000, 1e-8, NaN, 0.1]);
    const h = f32ArrayToF16(x);
    expect(h).toBeInstanceOf(Uint16Array);
    expect([...h].slice(0, 7)).toEqual([0, 0x8000, 0x3c00, 0xc100, 0x7bff, 0x7c00, 0x0000]);
    const back = f16ArrayToF32(h);
    expect(back).toBeInstanceOf(Float32Array);
    expect(back[8]).toBe(Math.fround(roundF16(0.1)));
    expect(Number.isNaN(back[7])).toBe(true);
    expect([...roundF16Array(x)].map((v, i) => same(v, back[i]))).toEqual(Array(9).fill(true));
  });
});
