/**
 * The contribution codecs of the all-reduce: INT8 (AGoQ's codes, absmax per block) and plain fp32.
 * A decoder throws CollectiveError('invalid-payload') naming the sender on a malformed payload.
 */
import { absmaxScale } from '../../engine/quant/quantizer';
import { AGOQ_BLOCK, int8PayloadBytes } from '../../engine/scheme/wire';
import { CollectiveError } from './group';

/**
 * Layout: ⌈n/block⌉ fp32 scales (little-endian), then n INT8 codes. The same codes and scales as
 * quantizeRef(x, 'int8', group block) — absmax scale fp32(amax/127), codes RNE(fp32(x/s)) — in one
 * specialised pass: this runs on every gradient element every step, so it avoids the generic
 * quantizer's per-element dispatch and packing. fp32(a/b) of two floats computed
 * in double is the correctly rounded fp32 quotient (53 ≥ 2·24 + 2), as on the GPU.
 */
export function encodeInt8Chunk(x: Float32Array, block = AGOQ_BLOCK): Uint8Array {
  const n = x.length;
  const nb = Math.ceil(n / block);
  const out = new Uint8Array(int8PayloadBytes(n, block));
  const scales = new Float32Array(nb);
  const codes = new Int8Array(out.buffer, 4 * nb, n);
  for (let k = 0; k < nb; k++) {
    const a0 = k * block;
    const a1 = Math.min(n, a0 + block);
    let amax = 0;
    for (let i = a0; i < a1; i++) {
      const a = Math.abs(x[i]);
      if (a > amax && a !== Infinity) amax = a;
    }
    const s = absmaxScale(amax, 'int8');
    scales[k] = s;
    if (s === 0) continue;
    for (let i = a0; i < a1; i++) {
      const v = Math.fround(x[i] / s);
      if (!Number.isFinite(v)) continue; // NaN / ±Inf inputs are coded 0, as quantizeRef does
      let r = Math.round(v);
      if (r - v === 0.5 && (r & 1) !== 0) r -= 1; // ties to even (Math.round rounds them up)
      codes[i] = Math.min(127, Math.max(-128, r));
    }
  }
  const dv = new DataView(out.buffer);
  for (let k = 0; k < nb; k++) dv.setFloat32(4 * k, scales[k], true);
  return out;
}

/**
 * A block-scaled chunk's scales (⌈n/block⌉ fp32 LE at its start), after checking its length; a scale
 * that is negative, NaN, or so large that a code of magnitude `maxCode` would decode to infinity is
 * refused. Both integer decoders read their payloads through it.
 */
export function chunkScales(bytes: Uint8Array, n: number, block: number, expected: number, kind: string, maxCode: number, who: string): Float32Array {
  if (bytes.length !== expected) throw new CollectiveError('invalid-payload', `${kind} chunk from ${who}: ${bytes.length} B, expected ${expected}`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const scales = new Float32Array(Math.ceil(n / block));
  for (let k = 0; k < scales.length; k++) {
    const s = dv.getFloat32(4 * k, true);
    if (!(s >= 0 && s <= 3.4028234663852886e38 / maxCode)) throw new CollectiveError('invalid-payload', `${kind} chunk from ${who}: bad scale ${s}`);
    scales[k] = s;
  }
  return scales;
}

/** Inverse of encodeInt8Chunk; throws CollectiveError('invalid-payload') on a wrong length or bad scale. */
export function decodeInt8Chunk(bytes: Uint8Array, n: number, block = AGOQ_BLOCK, who = 'peer'): Float32Array {
  const scales = chunkScales(bytes, n, block, int8PayloadBytes(n, block), 'int8', 128, who);
  const codes = new Int8Array(bytes.buffer, bytes.byteOffset + 4 * scales.length, n);
  const out = new Float32Array(n);
  for (let k = 0; k < scales.length; k++) {
    const s = scales[k];
    const a1 = Math.min(n, (k + 1) * block);
    for (let i = k * block; i < a1; i++) out[i] = codes[i] * s;
  }
  return out;
}

export function encodeF32(x: Float32Array): Uint8Array {
  const out = new Uint8Array(4 * x.length);
  const dv = new DataView(out.buffer);
  for (let i = 0; i < x.length; i++) dv.setFloat32(4 * i, x[i], true);
  return out;
}

/** fp32 values as sent; finiteness is the screen's to judge (a NaN contribution is left out, not fatal). */
export function decodeF32(bytes: Uint8Array, n: number, who = 'peer'): Float32Array {
  if (bytes.length !== 4 * n) throw new CollectiveError('invalid-payload', `fp32 chunk from ${who}: ${bytes.length} B, expected ${4 * n}`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = dv.getFloat32(4 * i, true);
  return out;
}
