/**
 * Wire frames of the peer group and reassembly of chunked messages.
 *
 * Frame = 44-byte header + payload, all integers little-endian u32 unless noted:
 *   0 magic 'WGPG'   4 version u8   5 type u8   6 flags u16 (must be 0)
 *   8 runId   12 step   16 tag (collective index within the step)   20 seq (message number, per sender)
 *   24 chunkIndex   28 chunkCount   32 payloadLength (this frame)   36 totalLength (whole message)
 *   40 crc32 of bytes 0..40 followed by the payload
 * A message is split into chunks of ≤ chunkPayload bytes (default 16 KiB − header: the size every
 * browser's SCTP stack passes without fragmentation trouble). Every check is a returned reason,
 * never a throw: the receive path must survive arbitrary bytes from the network.
 */
import { DEFAULT_CHUNK_PAYLOAD, FRAME_HEADER_BYTES as HEADER_BYTES } from '../../engine/scheme/wire';
import { crc32, crc32Update } from './crc32';

export const FRAME_MAGIC = 0x47504757; // bytes 'W','G','P','G'
export const FRAME_VERSION = 1;
// The header's size and the default chunk are the engine's (its wire-byte accounting counts them).
export { DEFAULT_CHUNK_PAYLOAD, HEADER_BYTES };

export enum FrameType {
  Broadcast = 1,
  AllGather = 2,
  AllToAll = 3,
  Barrier = 4,
}
const TYPE_MAX = 4;

export interface FrameHeader {
  type: FrameType;
  runId: number;
  step: number;
  tag: number;
  seq: number;
  chunkIndex: number;
  chunkCount: number;
  totalLength: number;
}

export interface Frame extends FrameHeader {
  payload: Uint8Array;
}

export type DecodeResult = { ok: true; frame: Frame } | { ok: false; reason: string };

export function encodeFrame(h: FrameHeader, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(HEADER_BYTES + payload.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, FRAME_MAGIC, true);
  dv.setUint8(4, FRAME_VERSION);
  dv.setUint8(5, h.type);
  dv.setUint16(6, 0, true);
  dv.setUint32(8, h.runId >>> 0, true);
  dv.setUint32(12, h.step >>> 0, true);
  dv.setUint32(16, h.tag >>> 0, true);
  dv.setUint32(20, h.seq >>> 0, true);
  dv.setUint32(24, h.chunkIndex, true);
  dv.setUint32(28, h.chunkCount, true);
  dv.setUint32(32, payload.length, true);
  dv.setUint32(36, h.totalLength, true);
  out.set(payload, HEADER_BYTES);
  dv.setUint32(40, frameCrc(out), true);
  return out;
}

function frameCrc(frame: Uint8Array): number {
  const c = crc32(frame.subarray(0, 40));
  return crc32Update(c, frame.subarray(HEADER_BYTES));
}

/** Structural checks of one frame (no knowledge of the group's run, step or members). */
export function decodeFrame(bytes: Uint8Array, maxFrameBytes = HEADER_BYTES + 256 * 1024): DecodeResult {
  const bad = (reason: string): DecodeResult => ({ ok: false, reason });
  if (!(bytes instanceof Uint8Array)) return bad('not bytes');
  if (bytes.length < HEADER_BYTES) return bad(`short frame (${bytes.length} B)`);
  if (bytes.length > maxFrameBytes) return bad(`oversized frame (${bytes.length} B)`);
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  if (dv.getUint32(0, true) !== FRAME_MAGIC) return bad('bad magic');
  const version = dv.getUint8(4);
  if (version !== FRAME_VERSION) return bad(`unsupported version ${version}`);
  const type = dv.getUint8(5);
  if (type < 1 || type > TYPE_MAX) return bad(`unknown type ${type}`);
  if (dv.getUint16(6, true) !== 0) return bad('nonzero flags');
  const payloadLength = dv.getUint32(32, true);
  if (payloadLength !== bytes.length - HEADER_BYTES) return bad('payload length mismatch');
  if (dv.getUint32(40, true) !== frameCrc(bytes)) return bad('bad checksum');
  const chunkIndex = dv.getUint32(24, true);
  const chunkCount = dv.getUint32(28, true);
  const totalLength = dv.getUint32(36, true);
  if (chunkCount < 1 || chunkIndex >= chunkCount) return bad('bad chunk index/count');
  if (payloadLength > totalLength) return bad('chunk larger than message');
  if (chunkCount > Math.max(1, totalLength)) return bad('more chunks than bytes');
  if (chunkCount === 1 && payloadLength !== totalLength) return bad('single chunk length mismatch');
  return {
    ok: true,
    frame: {
      type: type as FrameType,
      runId: dv.getUint32(8, true),
      step: dv.getUint32(12, true),
      tag: dv.getUint32(16, true),
      seq: dv.getUint32(20, true),
      chunkIndex,
      chunkCount,
      totalLength,
      payload: bytes.subarray(HEADER_BYTES),
    },
  };
}

export type MessageHeader = Omit<FrameHeader, 'chunkIndex' | 'chunkCount' | 'totalLength'>;

/** Frames of a message, ≤ chunkPayload payload bytes each, built lazily (a large gradient is not copied twice). */
export function* messageFrames(h: MessageHeader, payload: Uint8Array, chunkPayload = DEFAULT_CHUNK_PAYLOAD): Generator<Uint8Array> {
  if (!(chunkPayload >= 1)) throw new Error(`chunkPayload must be ≥ 1 (got ${chunkPayload})`);
  const count = Math.max(1, Math.ceil(payload.length / chunkPayload));
  for (let i = 0; i < count; i++) {
    const part = payload.subarray(i * chunkPayload, Math.min(payload.length, (i + 1) * chunkPayload));
    yield encodeFrame({ ...h, chunkIndex: i, chunkCount: count, totalLength: payload.length }, part);
  }
}

/** Splits a message into frames of ≤ chunkPayload payload bytes (an empty message is one frame). */
export function encodeMessage(h: MessageHeader, payload: Uint8Array, chunkPayload = DEFAULT_CHUNK_PAYLOAD): Uint8Array[] {
  return [...messageFrames(h, payload, chunkPayload)];
}

export interface ReassemblyLimits {
  /** Largest reassembled message (default 64 MiB). */
  maxMessageBytes: number;
  /** Partially received messages kept per peer; beyond it the new message is rejected (default 16). */
  maxInFlightPerPeer: number;
  /** A partial message older than this is dropped (default 30 s). */
  timeoutMs: number;
  /** Payload bytes per chunk the receiver accepts (default DEFAULT_CHUNK_PAYLOAD). */
  maxChunkPayload: number;
}

export const DEFAULT_REASSEMBLY: ReassemblyLimits = {
  maxMessageBytes: 64 * 1024 * 1024,
  maxInFlightPerPeer: 16,
  timeoutMs: 30_000,
  maxChunkPayload: DEFAULT_CHUNK_PAYLOAD,
};

export interface Message {
  type: FrameType;
  runId: number;
  step: number;
  tag: number;
  payload: Uint8Array;
}

interface PartialMsg {
  type: FrameType;
  runId: number;
  step: number;
  tag: number;
  count: number;
  total: number;
  chunks: Map<number, Uint8Array>;
  bytes: number;
  started: number;
}

export type AddResult = { kind: 'complete'; message: Message } | { kind: 'pending' } | { kind: 'reject'; reason: string };

/** Reassembles chunked messages per peer; bounded memory, never throws. */
export class Reassembler {
  private partials = new Map<string, Map<number, PartialMsg>>();
  readonly limits: ReassemblyLimits;

  constructor(
    limits: Partial<ReassemblyLimits> = {},
    private now: () => number = Date.now,
  ) {
    this.limits = { ...DEFAULT_REASSEMBLY, ...limits };
  }

  add(peer: string, f: Frame): AddResult {
    const L = this.limits;
    if (f.totalLength > L.maxMessageBytes) return { kind: 'reject', reason: `message too large (${f.totalLength} B)` };
    if (f.payload.length > L.maxChunkPayload) return { kind: 'reject', reason: `chunk too large (${f.payload.length} B)` };
    if (f.chunkCount === 1) {
      return { kind: 'complete', message: { type: f.type, runId: f.runId, step: f.step, tag: f.tag, payload: f.payload.slice() } };
    }
    this.expire();
    let mine = this.partials.get(peer);
    if (!mine) this.partials.set(peer, (mine = new Map()));
    let p = mine.get(f.seq);
    if (!p) {
      if (mine.size >= L.maxInFlightPerPeer) return { kind: 'reject', reason: 'too many messages in flight' };
      p = { type: f.type, runId: f.runId, step: f.step, tag: f.tag, count: f.chunkCount, total: f.totalLength, chunks: new Map(), bytes: 0, started: this.now() };
      mine.set(f.seq, p);
    } else if (p.type !== f.type || p.runId !== f.runId || p.step !== f.step || p.tag !== f.tag || p.count !== f.chunkCount || p.total !== f.totalLength) {
      return { kind: 'reject', reason: 'chunk header disagrees with its message' };
    }
    if (p.chunks.has(f.chunkIndex)) return { kind: 'reject', reason: 'duplicate chunk' };
    if (p.bytes + f.payload.length > p.total) {
      mine.delete(f.seq);
      if (mine.size === 0) this.partials.delete(peer);
      return { kind: 'reject', reason: 'chunks exceed message length (message dropped)' };
    }
    p.chunks.set(f.chunkIndex, f.payload.slice());
    p.bytes += f.payload.length;
    if (p.chunks.size < p.count) return { kind: 'pending' };
    mine.delete(f.seq);
    if (mine.size === 0) this.partials.delete(peer);
    if (p.bytes !== p.total) return { kind: 'reject', reason: 'chunks short of message length (message dropped)' };
    const out = new Uint8Array(p.total);
    let off = 0;
    for (let i = 0; i < p.count; i++) {
      const c = p.chunks.get(i)!;
      out.set(c, off);
      off += c.length;
    }
    return { kind: 'complete', message: { type: p.type, runId: p.runId, step: p.step, tag: p.tag, payload: out } };
  }

  /** Drops partial messages older than the timeout; returns how many were dropped. */
  expire(): number {
    const t = this.now();
    let n = 0;
    for (const [peer, m] of this.partials) {
      for (const [seq, p] of m) {
        if (t - p.started > this.limits.timeoutMs) {
          m.delete(seq);
          n++;
        }
      }
      if (m.size === 0) this.partials.delete(peer);
    }
    return n;
  }

  /** Whether a message of `peer` with this seq is being reassembled. */
  holds(peer: string, seq: number): boolean {
    return this.partials.get(peer)?.has(seq) ?? false;
  }

  /** Bytes the partial messages of `peer` will take once whole (their declared lengths). */
  bytesInFlight(peer: string): number {
    let n = 0;
    for (const p of this.partials.get(peer)?.values() ?? []) n += p.total;
    return n;
  }

  dropPeer(peer: string): void {
    this.partials.delete(peer);
  }

  /** Partial messages held, for tests and diagnostics. */
  inFlight(): number {
    let n = 0;
    for (const m of this.partials.values()) n += m.size;
    return n;
  }
}
