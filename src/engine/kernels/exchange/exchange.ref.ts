/**
 * Reference for the exchange kernels (./exchange.ts), on contributions in the wire's format
 * (INT8: ⌈n/256⌉ fp32 LE scales, then n int8 codes; fp32: n LE floats). The INT8 mean is the JS
 * all-reduce's reduction (peers/allreduce.ts): codes·s rounded to fp32, summed in fp32 in member
 * order, divided by the count. The fp32 mean here is summed in fp32 too (the GPU has no fp64).
 */
import { AGOQ_BLOCK, type GradWire } from '../../scheme/wire';

/** The scales of an INT8 contribution (copied when the bytes are not 4-byte aligned). */
export function wireScales(bytes: Uint8Array, n: number): Float32Array {
  const nb = Math.ceil(n / AGOQ_BLOCK);
  if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, nb);
  return new Float32Array(bytes.slice(0, 4 * nb).buffer);
}

function decode(bytes: Uint8Array, n: number, wire: GradWire): Float32Array {
  if (wire === 'fp32') return new Float32Array(bytes.slice(0, 4 * n).buffer);
  const nb = Math.ceil(n / AGOQ_BLOCK);
  const s = wireScales(bytes, n);
  const codes = new Int8Array(bytes.buffer, bytes.byteOffset + 4 * nb, n);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = codes[i] * s[Math.floor(i / AGOQ_BLOCK)];
  return out;
}

export function exchangeMeanRef(contributions: Uint8Array[], n: number, wire: GradWire): Float32Array {
  const acc = new Float32Array(n);
  for (const c of contributions) {
    const v = decode(c, n, wire);
    for (let i = 0; i < n; i++) acc[i] += v[i];
  }
  for (let i = 0; i < n; i++) acc[i] /= contributions.length;
  return acc;
}

/** Σ code² per block of 256 of an INT8 contribution. */
export function sumSquaresRef(bytes: Uint8Array, n: number): Uint32Array {
  const nb = Math.ceil(n / AGOQ_BLOCK);
  const codes = new Int8Array(bytes.buffer, bytes.byteOffset + 4 * nb, n);
  const out = new Uint32Array(nb);
  for (let i = 0; i < n; i++) out[Math.floor(i / AGOQ_BLOCK)] += codes[i] * codes[i];
  return out;
}

/** Σ c_j·c_k per block of 256 for every pair j ≤ k of INT8 contributions, pairs in row order (exchangeGramInt8's layout). */
export function gramRef(contributions: Uint8Array[], n: number): Int32Array {
  const nb = Math.ceil(n / AGOQ_BLOCK);
  const C = contributions.length;
  const codes = contributions.map((b) => new Int8Array(b.buffer, b.byteOffset + 4 * nb, n));
  const out = new Int32Array((nb * C * (C + 1)) / 2);
  let q = 0;
  for (let j = 0; j < C; j++) {
    for (let k = j; k < C; k++, q++) {
      for (let i = 0; i < n; i++) out[q * nb + Math.floor(i / AGOQ_BLOCK)] += codes[j][i] * codes[k][i];
    }
  }
  return out;
}

/** Whether an fp32 contribution holds a NaN or ±Inf. */
export function hasNonFiniteRef(bytes: Uint8Array, n: number): boolean {
  return decode(bytes, n, 'fp32').some((v) => !Number.isFinite(v));
}
