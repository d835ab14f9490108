/**
 * IEEE 754 binary16 (WGSL `f16`) emulated exactly in TypeScript: the reference the f16 kernels are
 * checked against, and the only place f16 arithmetic can be exercised where the GPU has no
 * `shader-f16` (SwiftShader in CI).
 *
 * Conversion is from f32, as a GPU converts: a JS number is first rounded to f32 (Math.fround), then
 * to f16 with round-to-nearest-even. Rounding f64 straight to f16 could differ from that double
 * rounding in rare ties, and the kernels only ever see f32 values.
 *   range: ±65504 (finite max); from 65520 (the RNE midpoint to the next binade) up, ±inf
 *   subnormals: multiples of 2^-24 below 2^-14; below 2^-25 (and at it, ties to even) ±0
 *   NaN stays NaN (quiet, the top mantissa bits kept); the sign of zero is kept.
 */

export const F16_MAX = 65504;
/** Smallest positive normal f16 (2^-14) and smallest subnormal (2^-24). */
export const F16_MIN_NORMAL = 2 ** -14;
export const F16_MIN_SUBNORMAL = 2 ** -24;
/** 2^-10: the spacing of f16 values in [1, 2). */
export const F16_EPSILON = 2 ** -10;

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The f16 bit pattern (0..0xffff) of x rounded to f32, then to f16 (round to nearest, ties to even). */
export function f32ToF16Bits(x: number): number {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  const exp = (b >>> 23) & 0xff;
  const mant = b & 0x7fffff;
  if (exp === 0xff) return mant ? sign | 0x7e00 | (mant >>> 13) : sign | 0x7c00;
  const e = exp - 112; // the f16 biased exponent (f32 bias 127, f16 bias 15)
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    // f16 subnormal (or zero): m16 = significand · 2^(exp − 126), rounded.
    const shift = 126 - exp;
    if (shift > 25) return sign; // below 2^-25: rounds to zero
    const sig = mant | 0x800000;
    let q = sig >>> shift;
    const r = sig & ((1 << shift) - 1);
    const half = 1 << (shift - 1);
    if (r > half || (r === half && (q & 1))) q++; // a carry into 0x400 is the smallest normal, correctly
    return sign | q;
  }
  let h = (e << 10) | (mant >>> 13);
  const r = mant & 0x1fff;
  if (r > 0x1000 || (r === 0x1000 && (h & 1))) h++; // a carry into the exponent is right, up to inf
  return sign | h;
}

/** The value of an f16 bit pattern (exact as an f32 and as a JS number). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (exp === 0) return sign * m * F16_MIN_SUBNORMAL;
  if (exp === 0x1f) return m ? NaN : sign * Infinity;
  return sign * (1024 + m) * 2 ** (exp - 25);
}

/** x rounded to f32, then to the nearest f16 (ties to even), as a number. */
export function roundF16(x: number): number {
  return f16BitsToF32(f32ToF16Bits(x));
}

/** Each element rounded to f16, as bit patterns (the layout of an `array<f16>` buffer). */
export function f32ArrayToF16(x: ArrayLike<number>): Uint16Array {
  const out = new Uint16Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = f32ToF16Bits(x[i]);
  return out;
}

/** f16 bit patterns (an `array<f16>` buffer read back) as f32. */
export function f16ArrayToF32(h: ArrayLike<number>): Float32Array {
  const out = new Float32Array(h.length);
  for (let i = 0; i < h.length; i++) out[i] = f16BitsToF32(h[i]);
  return out;
}

/** Each element rounded to f16 and back (what an operand becomes once stored as f16). */
export function roundF16Array(x: ArrayLike<number>): Float32Array {
  const out = new Float32Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = roundF16(x[i]);
  return out;
}
