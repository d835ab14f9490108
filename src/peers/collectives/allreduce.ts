/**
 * All-reduce (mean over peers) of a Float32Array gradient, verifiable by every member
 * (verified-reduce.ts): every member all-gathers every contribution and reduces them itself.
 *  - 'fp32': contributions in fp32, summed in fp64 in rank order, the mean rounded once;
 *  - 'int8': AGoQ's codes (INT8, absmax per block of 256, quantizeRef's codes), dequantized and
 *    summed in fp32 in rank order, divided by the number summed. One quantization per element
 *    (the two-shot scheme's second, of the reduced chunk, is gone with its owners).
 * Per-element error vs the exact mean m (RTN, s_i = rank i's block absmax/127):
 *   |out − m| ≤ mean_i(s_i)/2 (+ fp32 rounding).
 * Wire payload of a contribution of n elements: n code bytes + 4·⌈n/256⌉ scale bytes (vs 4n for fp32),
 * sent to each of the N−1 others, plus an echo of N digests (engine/scheme/wire.ts counts both).
 */
import { AGOQ_BLOCK, chunkBounds, int8PayloadBytes, type WireFormat } from '../../engine/scheme/wire';
import type { Exclusion, ScreenOptions } from './screen';
import type { PeerGroup } from './group';
import { reduceVerified, type VerifiedResult } from './verified-reduce';

/** The wire format (engine/scheme/wire.ts, which also holds the byte formula); 'int4' like 'int8' with INT4 codes. */
export type AllReduceMode = WireFormat;
export { AGOQ_BLOCK, chunkBounds, int8PayloadBytes };
export { allReduceWireBytes, chunkPayloadBytes, echoWireBytes, gatherWireBytes, messageWireBytes } from '../../engine/scheme/wire';
export { decodeInt8Chunk, encodeInt8Chunk } from './chunk-codec';

export interface AllReduceOptions {
  mode: AllReduceMode;
  /** INT8 block size (default 256). */
  blockSize?: number;
  /** Screening before the sum (dp-screen.ts); default none: only non-finite contributions are left out. */
  screen?: ScreenOptions | null;
  /** How long to wait for a contribution the others already hold before asking for a relay (verified-reduce.ts). */
  graceMs?: number;
}

export interface AllReduceResult {
  out: Float32Array;
  /** Transport bytes this rank sent / received during the call (frames, headers included). */
  bytesSent: number;
  bytesReceived: number;
  /** Contributions left out of the mean (every member that got the same bytes leaves out the same). */
  excluded: Exclusion[];
  /** Ranks summed (ascending). */
  kept: number[];
  /** What this member saw go wrong but cannot prove (named, not removed). */
  notices: VerifiedResult['notices'];
}

/** Mean of `x` over the group's ranks; every rank must call it with the same length and options. */
export async function allReduceMean(group: PeerGroup, x: Float32Array, opts: AllReduceOptions): Promise<AllReduceResult> {
  const r = await reduceVerified(group, x, { mode: opts.mode, blockSize: opts.blockSize, screen: opts.screen ?? null, graceMs: opts.graceMs });
  return { out: r.out, bytesSent: r.bytesSent, bytesReceived: r.bytesReceived, excluded: r.excluded, kept: r.kept, notices: r.notices };
}
