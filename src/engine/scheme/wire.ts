/**
 * The gradient's wire format in data parallel (the scheme's `grads.wire`) and the exact bytes one
 * peer sends for it. The all-reduce itself is peers/allreduce.ts; the byte formula lives here so the
 * engine's accounting (train/probe-bits.ts) and the transport agree without the engine importing peers.
 *  - 'fp32': all-to-all of fp32 chunks, then all-gather of the fp32 means;
 *  - 'int8': AGoQ's two-shot all-reduce, INT8 absmax per block of AGOQ_BLOCK, round to nearest.
 * DiLoCo's pseudo-gradients may also travel as 'int4': the same two-shot scheme, INT4 absmax per
 * block of AGOQ_BLOCK (one fp32 scale each), two codes per byte (low nibble first, pack.ts's layout).
 */
export type GradWire = 'fp32' | 'int8';
/** What the two-shot all-reduce can carry: the gradient formats and INT4 (DiLoCo's pseudo-gradients). */
export type WireFormat = GradWire | 'int4';
export const WIRE_FORMATS: readonly WireFormat[] = ['fp32', 'int8', 'int4'];
export const AGOQ_BLOCK = 256;

/** Bytes of a transport frame's header (peers/framing.ts lays it out) and the default payload per frame. */
export const FRAME_HEADER_BYTES = 44;
export const DEFAULT_CHUNK_PAYLOAD = 16 * 1024 - FRAME_HEADER_BYTES;

/** A scheme cell (scheme.ts's QuantSpec), structurally: scheme.ts imports this file. */
interface WireCell { format: string; granularity: string; group: number; rounding: string }

/** The all-reduce's quantizer as a scheme cell: what `grads.wire` says for the INT8 all-reduce. */
export const INT8_WIRE = { format: 'int8', granularity: 'group', group: AGOQ_BLOCK, rounding: 'nearest' } as const;

/** The all-reduce mode a `grads.wire` cell asks for; null when no all-reduce carries that format. */
export function gradWireOf(spec: WireCell): GradWire | null {
  if (spec.format === 'fp32') return 'fp32';
  const same = spec.format === INT8_WIRE.format && spec.granularity === INT8_WIRE.granularity
    && spec.group === INT8_WIRE.group && spec.rounding === INT8_WIRE.rounding;
  return same ? 'int8' : null;
}

/** [start, end) of the chunk each rank owns: ⌈blocks/N⌉ blocks per rank, trailing ranks may be empty. */
export function chunkBounds(n: number, ranks: number, align = AGOQ_BLOCK): [number, number][] {
  const per = Math.ceil(Math.ceil(n / align) / ranks) * align;
  return Array.from({ length: ranks }, (_, r) => [Math.min(n, r * per), Math.min(n, (r + 1) * per)] as [number, number]);
}

export function int8PayloadBytes(n: number, block = AGOQ_BLOCK): number {
  return 4 * Math.ceil(n / block) + n;
}

/** ⌈n/block⌉ fp32 scales, then ⌈n/2⌉ bytes of packed nibbles. */
export function int4PayloadBytes(n: number, block = AGOQ_BLOCK): number {
  return 4 * Math.ceil(n / block) + Math.ceil(n / 2);
}

/** Payload bytes of one chunk of n elements in a mode. */
export function chunkPayloadBytes(n: number, mode: WireFormat, block = AGOQ_BLOCK): number {
  return mode === 'int8' ? int8PayloadBytes(n, block) : mode === 'int4' ? int4PayloadBytes(n, block) : 4 * n;
}

/** Wire bytes (payload + frame headers) of one message of `len` payload bytes. */
export function messageWireBytes(len: number, chunkPayload = DEFAULT_CHUNK_PAYLOAD): number {
  return len + FRAME_HEADER_BYTES * Math.max(1, Math.ceil(len / chunkPayload));
}

/**
 * Exact transport bytes `rank` sends in one all-reduce: the all-to-all sends chunk r to each
 * rank r ≠ self, the all-gather sends the own reduced chunk to the N−1 others. (What a rank receives
 * equals what it sends when all chunks have the same length.)
 */
export function allReduceWireBytes(
  n: number,
  ranks: number,
  rank: number,
  mode: WireFormat,
  opts: { blockSize?: number; chunkPayload?: number } = {},
): number {
  const block = opts.blockSize ?? AGOQ_BLOCK;
  const cp = opts.chunkPayload ?? DEFAULT_CHUNK_PAYLOAD;
  const b = chunkBounds(n, ranks, block);
  let total = 0;
  for (let r = 0; r < ranks; r++) if (r !== rank) total += messageWireBytes(chunkPayloadBytes(b[r][1] - b[r][0], mode, block), cp);
  const own = messageWireBytes(chunkPayloadBytes(b[rank][1] - b[rank][0], mode, block), cp);
  return total + (ranks - 1) * own;
}
