/**
 * f16 storage, the plain-TS twin of src/engine/kernels/f16/f16.wgsl: fp32 → IEEE half with round to
 * nearest, ties to even (quant/f16.ts f32ToF16Bits: subnormals kept, |x| ≥ 65520 → ±Inf), NaN → the
 * quiet NaN of its sign (half() in kernels/matmul-f16/cast.ts drops the payload); two values per u32
 * word with element i in bits 16·(i%2). Unpacking is exact. Works on raw fp32 bit patterns.
 */
import { f32ToF16Bits } from '../../quant/f16';

const f = new Float32Array(1);
const u = new Uint32Array(f.buffer);

/** The f16 bits (low 16) of one fp32 bit pattern. */
export function f16Encode(bits: number): number {
  const b = bits >>> 0;
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) & 0x8000) | 0x7e00;
  u[0] = b;
  return f32ToF16Bits(f[0]);
}

/** The fp32 bit pattern of one f16 value (exact; a NaN keeps its sign and top mantissa bits). */
export function f16Decode(h: number): number {
  const sign = (h & 0x8000) << 16;
  const exp = (h >>> 10) & 0x1f;
  const m = h & 0x3ff;
  if (exp === 0x1f) return (sign | 0x7f800000 | (m << 13)) >>> 0;
  if (exp > 0) return (sign | ((exp + 112) << 23) | (m << 13)) >>> 0;
  f[0] = m * 2 ** -24; // zero or subnormal: an exact normal fp32
  return (sign | u[0]) >>> 0;
}

/** Words needed for n f16 values. */
export const f16Words = (n: number): number => Math.ceil(n / 2);

/** Packs fp32 bit patterns into f16 words. */
export function packF16Ref(bits: Uint32Array): Uint32Array {
  const out = new Uint32Array(f16Words(bits.length));
  for (let i = 0; i < bits.length; i++) out[i >> 1] |= f16Encode(bits[i]) << (16 * (i & 1));
  return out;
}

/** The fp32 bit patterns of n packed f16 values. */
export function unpackF16Ref(words: Uint32Array, n: number): Uint32Array {
  if (words.length < f16Words(n)) throw new Error(`unpackF16Ref: ${words.length} words hold fewer than ${n} values`);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = f16Decode((words[i >> 1] >>> (16 * (i & 1))) & 0xffff);
  return out;
}

/** fp32 values rounded through f16 storage (what a stored tensor reads back as). */
export function roundF16Ref(x: Float32Array): Float32Array {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  return new Float32Array(unpackF16Ref(packF16Ref(bits), x.length).buffer);
}
