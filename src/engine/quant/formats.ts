/**
 * The four element formats of the quantizers, as scalar codecs over already-scaled values
 * (v = x / s). Codes are unsigned bit patterns: FP8 bytes, or two's-complement INT8 / INT4 masked
 * to 8 / 4 bits. WGSL twins: `e4m3_encode`, `e5m2_encode`, `int_encode` (+ `_sr`) in
 * shaders/quant/codec.wgsl.
 *
 * Rounding:
 * - nearest: round to nearest, ties to even, saturating at ±QMAX (INT: the two's-complement range
 *   [−QMAX−1, QMAX], so every code round-trips; absmax scaling never reaches −QMAX−1).
 * - stochastic, with a uniform u ∈ (0,1): with lo ≤ v ≤ hi the neighbouring grid values, round to
 *   the one farther from zero with probability (|v| − |nearer|)/(hi − lo) — i.e. up with probability
 *   (v − lo)/(hi − lo) — so E[decode(code)] = v for |v| within range. Values outside the range are
 *   clamped first.
 * Non-finite v (NaN, ±Inf) encodes as code 0 (NF4: its zero, code 7): the quantizers' rule for NaN/Inf inputs.
 */
import { decodeE4M3, decodeE5M2, E4M3, E5M2, encodeMini, fp8Quantum, type MiniFloat, roundHalfEven } from './fp8';
import { decodeNf4, encodeNf4, NF4_ZERO } from './nf4';

/** 'nf4' (./nf4.ts, QLoRA's NormalFloat) is a weight-storage format: nearest rounding only. */
export type QuantFormat = 'fp8-e4m3' | 'fp8-e5m2' | 'int8' | 'int4' | 'nf4';
/** The formats of the training schemes and the codec CLI (every rounding); NF4 is QLoRA's base only. */
export const QUANT_FORMATS: readonly QuantFormat[] = ['fp8-e4m3', 'fp8-e5m2', 'int8', 'int4'];

/** Largest finite magnitude of each format: the absmax quantizers map max|x| onto it. */
export const QMAX: Record<QuantFormat, number> = { 'fp8-e4m3': 448, 'fp8-e5m2': 57344, int8: 127, int4: 7, nf4: 1 };
export const BITS: Record<QuantFormat, number> = { 'fp8-e4m3': 8, 'fp8-e5m2': 8, int8: 8, int4: 4, nf4: 4 };
/** Index of each format in WGSL (`override FMT`; 3 and 4 are the 4-bit ones). */
export const FORMAT_ID: Record<QuantFormat, number> = { 'fp8-e4m3': 0, 'fp8-e5m2': 1, int8: 2, int4: 3, nf4: 4 };

/** The code that decodes to 0: what zero-scale groups and non-finite inputs get. */
export const zeroCode = (fmt: QuantFormat): number => (fmt === 'nf4' ? NF4_ZERO : 0);

export function isQuantFormat(s: string): s is QuantFormat {
  return (QUANT_FORMATS as readonly string[]).includes(s);
}

function miniOf(fmt: QuantFormat): MiniFloat | null {
  return fmt === 'fp8-e4m3' ? E4M3 : fmt === 'fp8-e5m2' ? E5M2 : null;
}

/** INT-b nearest: RNE, saturated to [−qmax−1, qmax], masked to b = log2(2·(qmax+1)) bits. */
export function encodeInt(v: number, qmax: number): number {
  const r = Math.min(qmax, Math.max(-qmax - 1, roundHalfEven(v)));
  return r & (2 * qmax + 1);
}

export function decodeInt8(code: number): number {
  return ((code & 0xff) << 24) >> 24;
}
export function decodeInt4(code: number): number {
  return ((code & 0xf) << 28) >> 28;
}

/** Stochastic rounding of a magnitude a ≥ 0 on a grid of step q (a power of two or 1): exact in fp32. */
function srMagnitude(a: number, q: number, u: number): number {
  const t = a / q;
  const fl = Math.floor(t);
  return (fl + (u < t - fl ? 1 : 0)) * q;
}

export function encodeScalar(fmt: QuantFormat, v: number, rounding?: { u: number }): number {
  if (fmt === 'nf4') {
    if (rounding) throw new Error('nf4: stochastic rounding is not supported (NF4 stores a frozen base: use nearest)');
    return encodeNf4(v);
  }
  if (!Number.isFinite(v)) return 0;
  const mini = miniOf(fmt);
  const qmax = QMAX[fmt];
  if (!rounding) return mini ? encodeMini(mini, v) : encodeInt(v, qmax);
  const neg = v < 0 || Object.is(v, -0);
  if (mini) {
    const a = Math.min(Math.abs(v), mini.max);
    const r = srMagnitude(a, fp8Quantum(mini, a), rounding.u);
    return encodeMini(mini, neg ? -r : r);
  }
  const c = Math.min(qmax, Math.max(-qmax - 1, v));
  const r = srMagnitude(Math.abs(c), 1, rounding.u);
  return (c < 0 ? -r : r) & (2 * qmax + 1);
}

export function decodeScalar(fmt: QuantFormat, code: number): number {
  switch (fmt) {
    case 'fp8-e4m3':
      return decodeE4M3(code);
    case 'fp8-e5m2':
      return decodeE5M2(code);
    case 'int8':
      return decodeInt8(code);
    case 'int4':
      return decodeInt4(code);
    case 'nf4':
      return decodeNf4(code);
  }
}
