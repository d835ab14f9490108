/**
 * The gradient's wire format in data parallel (the scheme's `grads.wire`) and the exact bytes one
 * peer sends for it. The all-reduce itself is peers/allreduce.ts; the byte formula lives here so the
 * engine's accounting (train/probe-bits.ts) and the transport agree without the engine importing peers.
 *  - 'fp32': every member's gradient in fp32;
 *  - 'int8': AGoQ's INT8 codes, absmax per block of AGOQ_BLOCK, round to nearest.
 * DiLoCo's pseudo-gradients may also travel as 'int4': INT4 absmax per block of AGOQ_BLOCK (one
 * fp32 scale each), two codes per byte (low nibble first, pack.ts's layout).
 * Every member all-gathers the contributions and reduces them itself (verifiable).
 */
export type GradWire = 'fp32' | 'int8';
/** What the all-reduce can carry: the gradient formats and INT4 (DiLoCo's pseudo-gradients). */
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

/** Bytes of a contribution digest (SHA-256) in the verifiable all-reduce's echo. */
export const DIGEST_BYTES = 32;

/**
 * Exact transport bytes one rank sends to all-gather its contribution of n elements (every member
 * then reduces all of them itself, peers/verified-reduce.ts): N−1 copies of the whole payload.
 */
export function gatherWireBytes(n: number, ranks: number, mode: WireFormat, opts: { blockSize?: number; chunkPayload?: number } = {}): number {
  return (ranks - 1) * messageWireBytes(chunkPayloadBytes(n, mode, opts.blockSize ?? AGOQ_BLOCK), opts.chunkPayload ?? DEFAULT_CHUNK_PAYLOAD);
}

/** A contribution's signed header (Ed25519 public key + signature) and one echo slot (key + digest + signature). */
export const SIGNED_HEADER_BYTES = 96;
export const ECHO_SLOT_BYTES = 128;

/**
 * Bytes one rank sends besides its contribution's buckets (commit, then reveal): its signed
 * commitment (one slot), its commitment row and its echo (one slot per rank each) to each of the
 * N−1 others. Relays, sent only when a contribution went missing, are not counted.
 */
export function echoWireBytes(ranks: number, chunkPayload = DEFAULT_CHUNK_PAYLOAD): number {
  return ranks > 1 ? (ranks - 1) * (messageWireBytes(ECHO_SLOT_BYTES, chunkPayload) + 2 * messageWireBytes(ranks * ECHO_SLOT_BYTES, chunkPayload)) : 0;
}

/**
 * Exact transport bytes a rank sends in one all-reduce of n elements: the all-gather of its
 * contribution plus the digest echo (the same on every rank; `rank` is kept for callers).
 */
export function allReduceWireBytes(
  n: number,
  ranks: number,
  _rank: number,
  mode: WireFormat,
  opts: { blockSize?: number; chunkPayload?: number } = {},
): number {
  return gatherWireBytes(n, ranks, mode, opts) + echoWireBytes(ranks, opts.chunkPayload);
}
