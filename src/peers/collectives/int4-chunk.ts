/**
 * The INT4 chunk codec of the two-shot all-reduce (allreduce.ts), for DiLoCo's pseudo-gradients:
 * the codes and scales of quantizeRef(x, 'int4', group block) — absmax scale fp32(amax/7), codes
 * RNE(fp32(x/s)) saturated to [−8, 7] — which is what the GPU quantizer writes, so codes read back
 * from the GPU re-encode to the same bytes. Layout: ⌈n/block⌉ fp32 scales (little-endian), then
 * ⌈n/2⌉ bytes, element 2k in the low and 2k+1 in the high nibble (pack.ts's order).
 */
import { absmaxScale } from '../../engine/quant/quantizer';
import { AGOQ_BLOCK, int4PayloadBytes } from '../../engine/scheme/wire';
import { chunkScales } from './chunk-codec';

export function encodeInt4Chunk(x: Float32Array, block = AGOQ_BLOCK): Uint8Array {
  const n = x.length;
  const nb = Math.ceil(n / block);
  const out = new Uint8Array(int4PayloadBytes(n, block));
  const dv = new DataView(out.buffer);
  const codes = out.subarray(4 * nb);
  for (let k = 0; k < nb; k++) {
    const a0 = k * block;
    const a1 = Math.min(n, a0 + block);
    let amax = 0;
    for (let i = a0; i < a1; i++) {
      const a = Math.abs(x[i]);
      if (a > amax && a !== Infinity) amax = a;
    }
    const s = absmaxScale(amax, 'int4');
    dv.setFloat32(4 * k, s, true);
    if (s === 0) continue;
    for (let i = a0; i < a1; i++) {
      const v = Math.fround(x[i] / s);
      if (!Number.isFinite(v)) continue; // NaN / ±Inf inputs are coded 0, as quantizeRef does
      let r = Math.round(v);
      if (r - v === 0.5 && (r & 1) !== 0) r -= 1; // ties to even
      const c = Math.min(7, Math.max(-8, r)) & 0xf;
      codes[i >> 1] |= (i & 1) === 0 ? c : c << 4;
    }
  }
  return out;
}

/** Inverse of encodeInt4Chunk; throws CollectiveError('invalid-payload') on a wrong length or bad scale. */
export function decodeInt4Chunk(bytes: Uint8Array, n: number, block = AGOQ_BLOCK, who = 'peer'): Float32Array {
  const scales = chunkScales(bytes, n, block, int4PayloadBytes(n, block), 'int4', 8, who);
  const codes = bytes.subarray(4 * scales.length);
  const out = new Float32Array(n);
  for (let k = 0; k < scales.length; k++) {
    const s = scales[k];
    const a1 = Math.min(n, (k + 1) * block);
    for (let i = k * block; i < a1; i++) {
      const c = (codes[i >> 1] >> ((i & 1) * 4)) & 0xf;
      out[i] = ((c << 28) >> 28) * s;
    }
  }
  return out;
}
