/**
 * bfloat16 storage, the plain-TS twin of src/engine/kernels/bf16/bf16.wgsl: fp32 → bf16 with round to
 * nearest, ties to even (NaN stays NaN with its quiet bit set, ±Inf stay), two values per u32
 * word with element i in bits 16·(i%2); unpacking shifts the 16 bits back up (exact).
 * Works on raw bit patterns (Uint32Array), so NaN payloads survive.
 */

/** The bf16 bits (low 16) of one fp32 bit pattern. */
export function bf16Encode(bits: number): number {
  const b = bits >>> 0;
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) | 0x40) & 0xffff;
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

/** A number rounded to fp32, then to bf16 (round to nearest, ties to even), as a number. */
export function roundBf16(x: number): number {
  const f = new Float32Array([x]);
  const u = new Uint32Array(f.buffer);
  u[0] = bf16Encode(u[0]) << 16;
  return f[0];
}

/** Words needed for n bf16 values. */
export const bf16Words = (n: number): number => Math.ceil(n / 2);

/** Packs fp32 bit patterns into bf16 words. */
export function packBf16Ref(bits: Uint32Array): Uint32Array {
  const out = new Uint32Array(bf16Words(bits.length));
  for (let i = 0; i < bits.length; i++) out[i >> 1] |= bf16Encode(bits[i]) << (16 * (i & 1));
  return out;
}

/** The fp32 bit patterns of n packed bf16 values. */
export function unpackBf16Ref(words: Uint32Array, n: number): Uint32Array {
  if (words.length < bf16Words(n)) throw new Error(`unpackBf16Ref: ${words.length} words hold fewer than ${n} values`);
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) out[i] = (i & 1 ? words[i >> 1] & 0xffff0000 : words[i >> 1] << 16) >>> 0;
  return out;
}

/** fp32 values rounded through bf16 (what a stored tensor reads back as). */
export function roundBf16Ref(x: Float32Array): Float32Array {
  const bits = new Uint32Array(x.buffer, x.byteOffset, x.length);
  return new Float32Array(unpackBf16Ref(packBf16Ref(bits), x.length).buffer);
}
