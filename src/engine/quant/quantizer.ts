/**
 * Absmax quantizers — the reference the GPU kernels (src/engine/kernels/quantize/quantize.ts) match code for
 * code. For each scale group g (per tensor, per row, per column, or per G contiguous elements):
 *   s_g = fp32(max|x_g| / QMAX)          (correctly rounded fp32 division)
 *   code_i = encode(fp32(x_i / s_g))      (correctly rounded, then RNE or stochastic rounding)
 *   x̂_i = fp32(decode(code_i) · s_g)
 * Rules at the edges:
 * - NaN/±Inf inputs are ignored by the absmax and get code 0 (NF4: code 7; they decode to 0).
 * - A group with max|x| < 2^-110 (all zeros, in particular) stores s = 0 and codes 0 (NF4: 7), so it decodes
 *   to exact zeros. The threshold keeps every nonzero scale a normal fp32 number for all formats
 *   (2^-110 / 57344 > 2^-126), so GPUs that flush subnormals compute the same codes.
 * - Inputs are taken as fp32 (rounded with Math.fround first), like the GPU's f32 buffers.
 * - Stochastic rounding draws u = srUniform(seed, i) for flat element index i (see ./sr.ts).
 */
import { BITS, decodeScalar, encodeScalar, QMAX, type QuantFormat, zeroCode } from './formats';
import { type CodeBits, packCodes, unpackCodes } from './pack';
import { srUniform } from './sr';

export type Granularity =
  | { kind: 'tensor' }
  | { kind: 'row'; rowLength: number }
  | { kind: 'column'; rowLength: number }
  | { kind: 'group'; size: number };

export interface Quantized {
  format: QuantFormat;
  granularity: Granularity;
  n: number;
  /** Codes packed per ./pack.ts: ⌈n/4⌉ words (8-bit formats) or ⌈n/8⌉ words (INT4). */
  words: Uint32Array;
  /** One fp32 scale per group, in group order (row r, column c, group g). */
  scales: Float32Array;
}

export interface QuantizeOptions {
  rounding?: 'nearest' | 'stochastic';
  seed?: number;
}

/** Groups with an absmax below this store s = 0 (see the header). */
export const SCALE_TINY = 2 ** -110;

const f32 = Math.fround;

export function granularityLabel(g: Granularity): string {
  switch (g.kind) {
    case 'tensor':
      return 'tensor';
    case 'row':
      return `row(${g.rowLength})`;
    case 'column':
      return `column(${g.rowLength})`;
    case 'group':
      return `group(${g.size})`;
  }
}

/** Throws a clear error unless `g` is a valid granularity for n elements. */
export function validateGranularity(g: Granularity, n: number): void {
  if (!Number.isInteger(n) || n < 0) throw new Error(`quantize: invalid element count ${n}`);
  if (g.kind === 'tensor') return;
  const len = g.kind === 'group' ? g.size : g.rowLength;
  if (!Number.isInteger(len) || len < 1) throw new Error(`quantize: ${granularityLabel(g)}: length must be a positive integer`);
  if ((g.kind === 'row' || g.kind === 'column') && n % len !== 0) {
    throw new Error(`quantize: ${granularityLabel(g)} does not divide ${n} elements into whole rows`);
  }
}

export function numScales(g: Granularity, n: number): number {
  switch (g.kind) {
    case 'tensor':
      return 1;
    case 'row':
      return n / g.rowLength;
    case 'column':
      return g.rowLength;
    case 'group':
      return Math.ceil(n / g.size);
  }
}

/** Index of the scale that element i (flat, C order) uses. */
export function scaleIndex(g: Granularity, i: number): number {
  switch (g.kind) {
    case 'tensor':
      return 0;
    case 'row':
      return Math.floor(i / g.rowLength);
    case 'column':
      return i % g.rowLength;
    case 'group':
      return Math.floor(i / g.size);
  }
}

/** s = fp32(absmax / QMAX), or 0 for a (near-)zero group. */
export function absmaxScale(amax: number, fmt: QuantFormat): number {
  return amax < SCALE_TINY ? 0 : f32(amax / QMAX[fmt]);
}

export function computeScales(x: ArrayLike<number>, fmt: QuantFormat, gran: Granularity): Float32Array {
  validateGranularity(gran, x.length);
  const amax = new Float64Array(numScales(gran, x.length));
  for (let i = 0; i < x.length; i++) {
    const a = Math.abs(f32(x[i]));
    const k = scaleIndex(gran, i);
    if (a > amax[k] && a !== Infinity) amax[k] = a;
  }
  const s = new Float32Array(amax.length);
  for (let k = 0; k < amax.length; k++) s[k] = absmaxScale(amax[k], fmt);
  return s;
}

export function quantizeRef(
  x: ArrayLike<number>,
  fmt: QuantFormat,
  gran: Granularity,
  opts: QuantizeOptions = {},
): Quantized {
  const n = x.length;
  const scales = computeScales(x, fmt, gran);
  const stochastic = opts.rounding === 'stochastic';
  const seed = opts.seed ?? 0;
  if (stochastic && fmt === 'nf4') throw new Error('quantize nf4: stochastic rounding is not supported (use nearest)');
  const codes = new Uint8Array(n).fill(zeroCode(fmt));
  for (let i = 0; i < n; i++) {
    const s = scales[scaleIndex(gran, i)];
    const xi = f32(x[i]);
    if (s === 0 || !Number.isFinite(xi)) continue;
    const v = f32(xi / s);
    codes[i] = encodeScalar(fmt, v, stochastic ? { u: srUniform(seed, i) } : undefined);
  }
  return { format: fmt, granularity: gran, n, words: packCodes(codes, BITS[fmt] as CodeBits), scales };
}

export function dequantizeRef(q: Quantized): Float32Array {
  const codes = unpackCodes(q.words, q.n, BITS[q.format] as CodeBits);
  const out = new Float32Array(q.n);
  for (let i = 0; i < q.n; i++) {
    out[i] = decodeScalar(q.format, codes[i]) * q.scales[scaleIndex(q.granularity, i)];
  }
  return out;
}

/** Payload of a quantized tensor as stored or sent: code bytes plus 4 bytes per fp32 scale. */
export function payloadBytes(format: QuantFormat, n: number, nScales: number): number {
  return Math.ceil((n * BITS[format]) / 8) + 4 * nScales;
}
