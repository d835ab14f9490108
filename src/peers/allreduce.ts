/**
 * All-reduce (mean over peers) of a Float32Array gradient, two ways:
 *  - 'fp32': all-to-all of fp32 chunks → rank k sums chunk k in fp64 (rank order, so the result is
 *    deterministic) → all-gather of the fp32 means.
 *  - 'int8': AGoQ's precision-preserving two-shot scheme (seeds-brief §1.5): every rank quantizes
 *    its N chunks (INT8, absmax per block of 256, quantizeRef's codes) → all-to-all →
 *    rank k dequantizes the N pieces and sums in fp32 (rank order) → divides by N → re-quantizes
 *    → all-gather → everyone, the owner included, dequantizes the same bytes. Exactly two
 *    quantizations per element whatever N (a ring would re-quantize at each of N−1 hops), and every
 *    rank ends with bit-identical values.
 * Chunk boundaries are multiples of the block size, so the blocks of a chunk are the blocks of the
 * whole gradient. Per-element error vs the exact mean m (RTN, s = block absmax/127):
 *   |out − m| ≤ mean_i(s_i)/2 + s_r/2 (+ fp32 rounding), s_i of each rank's block, s_r of the reduced block.
 * Wire payload of a chunk of n elements: n code bytes + 4·⌈n/256⌉ scale bytes (vs 4n for fp32).
 */
import { absmaxScale } from '../engine/quant/quantizer';
import { AGOQ_BLOCK, chunkBounds, int8PayloadBytes, type WireFormat } from '../engine/scheme/wire';
import { CollectiveError, type PeerGroup } from './group';
import { decodeInt4Chunk, encodeInt4Chunk } from './int4-chunk';

/** The wire format (engine/scheme/wire.ts, which also holds the byte formula); 'int4' like 'int8' with INT4 codes. */
export type AllReduceMode = WireFormat;
export { AGOQ_BLOCK, chunkBounds, int8PayloadBytes };
export { allReduceWireBytes, chunkPayloadBytes, messageWireBytes } from '../engine/scheme/wire';

export interface AllReduceOptions {
  mode: AllReduceMode;
  /** INT8 block size (default 256); also the chunk alignment. */
  blockSize?: number;
}

export interface AllReduceResult {
  out: Float32Array;
  /** Transport bytes this rank sent / received during the call (frames, headers included). */
  bytesSent: number;
  bytesReceived: number;
}

/**
 * Layout: ⌈n/block⌉ fp32 scales (little-endian), then n INT8 codes. The same codes and scales as
 * quantizeRef(x, 'int8', group block) — absmax scale fp32(amax/127), codes RNE(fp32(x/s)) — in one
 * specialised pass: this runs on every gradient element twice per step, so it avoids the generic
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

/** Inverse of encodeInt8Chunk; throws CollectiveError('invalid-payload') on a wrong length or bad scale. */
export function decodeInt8Chunk(bytes: Uint8Array, n: number, block = AGOQ_BLOCK, who = 'peer'): Float32Array {
  const nb = Math.ceil(n / block);
  if (bytes.length !== int8PayloadBytes(n, block)) {
    throw new CollectiveError('invalid-payload', `int8 chunk from ${who}: ${bytes.length} B, expected ${int8PayloadBytes(n, block)}`);
  }
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const codes = new Int8Array(bytes.buffer, bytes.byteOffset + 4 * nb, n);
  const out = new Float32Array(n);
  for (let k = 0; k < nb; k++) {
    const s = dv.getFloat32(4 * k, true);
    // A scale above FLT_MAX/128 would decode code −128 to infinity.
    if (!(s >= 0 && s <= 3.4028234663852886e38 / 128)) throw new CollectiveError('invalid-payload', `int8 chunk from ${who}: bad scale ${s}`);
    const a1 = Math.min(n, (k + 1) * block);
    for (let i = k * block; i < a1; i++) out[i] = codes[i] * s;
  }
  return out;
}

function encodeF32(x: Float32Array): Uint8Array {
  const out = new Uint8Array(4 * x.length);
  const dv = new DataView(out.buffer);
  for (let i = 0; i < x.length; i++) dv.setFloat32(4 * i, x[i], true);
  return out;
}

function decodeF32(bytes: Uint8Array, n: number, who: string): Float32Array {
  if (bytes.length !== 4 * n) throw new CollectiveError('invalid-payload', `fp32 chunk from ${who}: ${bytes.length} B, expected ${4 * n}`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    const v = dv.getFloat32(4 * i, true);
    if (!Number.isFinite(v)) throw new CollectiveError('invalid-payload', `fp32 chunk from ${who}: non-finite value at ${i}`);
    out[i] = v;
  }
  return out;
}

/** Mean of `x` over the group's ranks; every rank must call it with the same length and options. */
export async function allReduceMean(group: PeerGroup, x: Float32Array, opts: AllReduceOptions): Promise<AllReduceResult> {
  const block = opts.blockSize ?? AGOQ_BLOCK;
  if (!Number.isInteger(block) || block < 1) throw new Error(`allReduceMean: bad block size ${block}`);
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i])) throw new Error(`allReduceMean: non-finite input at ${i}`);
  }
  const N = group.size;
  const t = group.transport.stats;
  const sent0 = t.bytesSent;
  const recv0 = t.bytesReceived;
  const bounds = chunkBounds(x.length, N, block);
  const [lo, hi] = bounds[group.rank];
  const mine = hi - lo;
  const int8 = opts.mode !== 'fp32'; // the quantized paths (INT8, INT4) accumulate alike
  const int4 = opts.mode === 'int4';
  const enc = (v: Float32Array) => (int4 ? encodeInt4Chunk(v, block) : int8 ? encodeInt8Chunk(v, block) : encodeF32(v));
  const dec = (b: Uint8Array, n: number, r: number) => (int4 ? decodeInt4Chunk(b, n, block, group.members[r])
    : int8 ? decodeInt8Chunk(b, n, block, group.members[r]) : decodeF32(b, n, group.members[r]));

  // Shot 1: all-to-all replaces reduce-scatter; each rank reduces the chunk it owns.
  const pieces = await group.allToAll(bounds.map(([a, b]) => enc(x.subarray(a, b))));
  const reduced = new Float32Array(mine);
  if (int8) {
    const acc = new Float32Array(mine); // fp32 accumulation, as specified
    for (let r = 0; r < N; r++) {
      const v = dec(pieces[r], mine, r);
      for (let i = 0; i < mine; i++) acc[i] += v[i];
    }
    for (let i = 0; i < mine; i++) reduced[i] = acc[i] / N;
  } else {
    const acc = new Float64Array(mine);
    for (let r = 0; r < N; r++) {
      const v = dec(pieces[r], mine, r);
      for (let i = 0; i < mine; i++) acc[i] += v[i];
    }
    for (let i = 0; i < mine; i++) reduced[i] = acc[i] / N;
  }

  // Shot 2: all-gather of the (re-quantized) reduced chunks; the owner decodes its own bytes too.
  const gathered = await group.allGather(enc(reduced));
  const out = new Float32Array(x.length);
  for (let r = 0; r < N; r++) {
    const [a, b] = bounds[r];
    out.set(dec(gathered[r], b - a, r), a);
  }
  return { out, bytesSent: t.bytesSent - sent0, bytesReceived: t.bytesReceived - recv0 };
}
