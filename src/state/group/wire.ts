/**
 * The group session protocol: small JSON messages the lab's members exchange beside the training
 * traffic — which run the group trains (so one Start starts it on every member, and a late joiner
 * learns what to build), who is ready, per-step reports for the roster, and a group-wide stop.
 *
 * Wire: 'WGGS' + UTF-8 JSON (≤ 4 KiB), validated with zod; anything else on the transport is training
 * traffic (the data-parallel driver's and the tensor-parallel group's 'WGPG' frames). splitTransport()
 * separates the two, so the training code sees a Transport without session messages (which it would
 * otherwise count as rejected frames) and the session never sees frames.
 */
import { z } from 'zod';
import type { MessageHandler, PeerId, Transport, Unsubscribe } from '../../peers/transport/transport';
import { GroupRunConfigSchema } from './config';

export const SESSION_VERSION = 1;
const MAGIC = Uint8Array.from([0x57, 0x47, 0x47, 0x53]); // 'WGGS'
export const MAX_SESSION_BYTES = 4096;

/** PeerJS member ids (room tag + random) and loopback ids alike: short, URL-safe. */
const PeerIdSchema = z.string().min(1).max(64).regex(/^[A-Za-z0-9_-]+$/);
const RunIdSchema = z.string().min(1).max(40).regex(/^[a-z0-9-]+$/);
const ms = z.number().finite().min(0).max(1e9);

const SessionMessageSchema = z.discriminatedUnion('t', [
  /** `by` started run `id`; `members` start it together (data parallel: others may join it later). */
  z.object({ t: z.literal('run'), v: z.literal(SESSION_VERSION), id: RunIdSchema, config: GroupRunConfigSchema, members: z.array(PeerIdSchema).min(1).max(8), by: PeerIdSchema }).strict(),
  /** The sender built its model for run `id` and can take part in its first collective. */
  z.object({ t: z.literal('ready'), id: RunIdSchema }).strict(),
  /** The sender finished step `step` of run `id` (roster and plots of the others). */
  z.object({
    t: z.literal('step'), id: RunIdSchema, step: z.number().int().min(0), world: z.number().int().min(1).max(8),
    loss: z.number().finite().nullable(), hash: z.number().int().min(0).max(0xffffffff).nullable(),
    stepMs: ms, commMs: ms, computeMs: ms,
  }).strict(),
  /** Everyone stops run `id` once `after` steps are done (the same step everywhere). */
  z.object({ t: z.literal('stop'), id: RunIdSchema, after: z.number().int().min(0), reason: z.string().max(200) }).strict(),
  /** The sender leaves run `id` (could not build it, failed, or left before the first step). */
  z.object({ t: z.literal('quit'), id: RunIdSchema, reason: z.string().max(300) }).strict(),
]);
export type SessionMessage = z.infer<typeof SessionMessageSchema>;
export type RunMessage = Extract<SessionMessage, { t: 'run' }>;
export type StepMessage = Extract<SessionMessage, { t: 'step' }>;

export function isSessionBytes(bytes: Uint8Array): boolean {
  return bytes.length >= MAGIC.length && MAGIC.every((b, i) => bytes[i] === b);
}

export function encodeSession(m: SessionMessage): Uint8Array {
  const body = new TextEncoder().encode(JSON.stringify(m));
  if (MAGIC.length + body.length > MAX_SESSION_BYTES) throw new Error(`session message '${m.t}' is ${body.length} B, over ${MAX_SESSION_BYTES} B`);
  const out = new Uint8Array(MAGIC.length + body.length);
  out.set(MAGIC);
  out.set(body, MAGIC.length);
  return out;
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/** Decodes a session message; never throws (the bytes come from the network). */
export function decodeSession(bytes: Uint8Array): { ok: true; msg: SessionMessage } | { ok: false; reason: string } {
  if (!isSessionBytes(bytes)) return { ok: false, reason: 'not a session message' };
  if (bytes.length > MAX_SESSION_BYTES) return { ok: false, reason: `oversized session message (${bytes.length} B)` };
  let json: unknown;
  try {
    json = JSON.parse(strictUtf8.decode(bytes.subarray(MAGIC.length)));
  } catch {
    return { ok: false, reason: 'session message is not UTF-8 JSON' };
  }
  const r = SessionMessageSchema.safeParse(json);
  if (!r.success) {
    const i = r.error.issues[0];
    return { ok: false, reason: `malformed session message (${i ? `${i.path.join('.') || 'message'}: ${i.message}` : 'invalid'})` };
  }
  return { ok: true, msg: r.data };
}

export interface SplitTransport {
  /** The transport without session messages: what DataParallel and PeerGroup run on. */
  training: Transport;
  /** Session messages, decoded, or the reason one was rejected. */
  onSession(h: (from: PeerId, m: SessionMessage) => void, onReject: (from: PeerId, reason: string) => void): Unsubscribe;
  /** Sends to one admitted peer; false when the peer is gone or the send failed (the session is best effort). */
  sendSession(peer: PeerId, m: SessionMessage): boolean;
}

export function splitTransport(t: Transport): SplitTransport {
  const training: Transport = {
    id: t.id,
    get identity() {
      return t.identity;
    },
    peers: () => t.peers(),
    send: (peer, bytes) => t.send(peer, bytes),
    bufferedAmount: (peer) => t.bufferedAmount(peer),
    waitForBufferedBelow: (peer, low) => t.waitForBufferedBelow(peer, low),
    onMessage: (h: MessageHandler) => t.onMessage((from, bytes) => {
      if (!isSessionBytes(bytes)) h(from, bytes);
    }),
    onPeerJoin: (h) => t.onPeerJoin(h),
    onPeerLeave: (h) => t.onPeerLeave(h),
    get stats() {
      return t.stats;
    },
    // The room's transport outlives any run: a run closing its view must not close it.
    close: () => {},
  };
  return {
    training,
    onSession: (h, onReject) => t.onMessage((from, bytes) => {
      if (!isSessionBytes(bytes)) return;
      const d = decodeSession(bytes);
      if (d.ok) h(from, d.msg);
      else onReject(from, d.reason);
    }),
    sendSession: (peer, m) => {
      if (!t.peers().includes(peer)) return false;
      try {
        t.send(peer, encodeSession(m));
        return true;
      } catch {
        return false;
      }
    },
  };
}
