/**
 * FP8 codecs — the specification the WGSL encoders in shaders/quant/codec.wgsl reproduce bit for bit.
 *
 * E4M3 ("fn", OCP/NVIDIA): bias 7, 3 mantissa bits, max ±448, min normal 2^-6, min subnormal 2^-9,
 *   no infinities, NaN = S.1111.111 (0x7F / 0xFF).
 * E5M2: bias 15, 2 mantissa bits, max ±57344, min normal 2^-14, min subnormal 2^-16,
 *   ±Inf = S.11111.00, NaN = S.11111.{01,10,11}.
 *
 * Encoding is round-to-nearest, ties-to-even, of the exact input value, saturating like CUDA's
 * `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, …)`: every |x| ≥ max (±Inf included) becomes ±max;
 * NaN becomes the canonical NaN 0x7F. The sign of zero is kept (−0 and negative values that round
 * to zero give 0x80), as hardware casts do.
 *
 * Written from the arithmetic (a power-of-two quantum per binade), not from bit tricks, so the
 * WGSL bit-level encoder and this one are two derivations that tests hold against each other.
 */

export interface MiniFloat {
  /** Mantissa bits. */
  m: number;
  bias: number;
  /** Largest finite magnitude and its code. */
  max: number;
  maxCode: number;
  hasInf: boolean;
}

export const E4M3: MiniFloat = { m: 3, bias: 7, max: 448, maxCode: 0x7e, hasInf: false };
export const E5M2: MiniFloat = { m: 2, bias: 15, max: 57344, maxCode: 0x7b, hasInf: true };

export const FP8_NAN = 0x7f;

/** floor(log2 a) for finite a > 0, exactly (Math.log2 may round across a power of two). */
export function floorLog2(a: number): number {
  let e = Math.floor(Math.log2(a));
  if (2 ** e > a) e--;
  else if (2 ** (e + 1) <= a) e++;
  return e;
}

/** Round half to even of a double. */
export function roundHalfEven(t: number): number {
  const f = Math.floor(t);
  const d = t - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/**
 * Grid step (a power of two) of format `f` around magnitude a ≥ 0: 2^(e−m) in the binade
 * [2^e, 2^(e+1)), and the subnormal step 2^(1−bias−m) below the smallest normal.
 */
export function fp8Quantum(f: MiniFloat, a: number): number {
  const emin = 1 - f.bias;
  const e = a < 2 ** emin ? emin : floorLog2(a);
  return 2 ** (e - f.m);
}

export function encodeMini(f: MiniFloat, x: number): number {
  if (Number.isNaN(x)) return FP8_NAN;
  const sign = x < 0 || Object.is(x, -0) ? 0x80 : 0;
  const a = Math.abs(x);
  if (a >= f.max) return sign | f.maxCode;
  const emin = 1 - f.bias;
  const e = a < 2 ** emin ? emin : floorLog2(a);
  // a / quantum is exact (power-of-two scaling), so the only rounding is this one.
  const r = roundHalfEven(a / 2 ** (e - f.m));
  // Codes of one sign are consecutive grid values, so the code is the grid index: (e − emin)·2^m
  // below binade e plus r (r = 2^(m+1) lands on the next binade's first code, as it should).
  return sign | (((e - emin) << f.m) + r);
}

export function decodeMini(f: MiniFloat, code: number): number {
  const c = code & 0xff;
  const s = c & 0x80 ? -1 : 1;
  const mmask = (1 << f.m) - 1;
  const emask = (1 << (7 - f.m)) - 1;
  const ef = (c >> f.m) & emask;
  const mf = c & mmask;
  if (ef === emask) {
    if (f.hasInf) return mf === 0 ? s * Infinity : NaN;
    if (mf === mmask) return NaN;
  }
  if (ef === 0) return s * mf * 2 ** (1 - f.bias - f.m);
  return s * (1 + mf / (1 << f.m)) * 2 ** (ef - f.bias);
}

export function encodeE4M3(x: number): number {
  return encodeMini(E4M3, x);
}
export function decodeE4M3(code: number): number {
  return decodeMini(E4M3, code);
}
export function encodeE5M2(x: number): number {
  return encodeMini(E5M2, x);
}
export function decodeE5M2(code: number): number {
  return decodeMini(E5M2, code);
}
