/**
 * The per-peer pieces of the PeerJS transport (src/peers/peerjs/peerjs.ts): the control messages of the
 * admission handshake and liveness, the state of one link, its roster entry, and small shims over PeerJS 1.5.5.
 */
import type { DataConnection, Peer } from 'peerjs';
import { z } from 'zod';
import type { PakeSession } from '../room/pake';
import { NONCE_BYTES, randomBytes } from '../room/room';
import { type LinkState, type PeerRole, ranksOf, type RosterEntry, RttEstimator } from '../room/roster';
import type { PeerId } from '../transport/transport';

export const DenyReason = z.enum(['passphrase', 'protocol', 'timeout']);
export type DenyReason = z.infer<typeof DenyReason>;
const seq = z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER);
/** Longest silence a member may announce ('busy': it is about to block its thread, e.g. compiling in Node). */
export const MAX_BUSY_MS = 300_000;
export const ControlMessage = z.discriminatedUnion('t', [
  z.object({ t: z.literal('hello'), v: z.number().int(), nonce: z.string().max(64) }),
  z.object({ t: z.literal('share'), y: z.string().max(64) }),
  z.object({ t: z.literal('proof'), mac: z.string().max(100) }),
  z.object({ t: z.literal('admit'), role: z.enum(['host', 'peer']) }),
  z.object({ t: z.literal('deny'), reason: DenyReason, detail: z.string().max(300) }),
  z.object({ t: z.literal('ping'), n: seq, ts: z.number().finite() }),
  z.object({ t: z.literal('pong'), n: seq, ts: z.number().finite() }),
  z.object({ t: z.literal('busy'), ms: z.number().int().nonnegative().max(MAX_BUSY_MS) }),
  z.object({ t: z.literal('bye') }),
]);
export type ControlMessage = z.infer<typeof ControlMessage>;

export interface Link {
  peer: PeerId;
  conn: DataConnection;
  /** We dialled this connection. */
  outgoing: boolean;
  state: LinkState;
  /** Closed or replaced: its events are ignored from now on. */
  closed: boolean;
  role: PeerRole | null;
  /** Our challenge to this peer. */
  nonce: Uint8Array;
  /** The PAKE with this peer (once its hello is in) and its session key (once its share is in). */
  pake: PakeSession | null;
  isk: Uint8Array | null;
  /**
   * Control messages are handled one after another (some await WebCrypto), so that replies leave in
   * the order their causes arrived: a peer's proof always precedes its verdict on ours.
   */
  controlChain: Promise<void>;
  /** We verified the peer's proof / the peer admitted us. */
  verified: boolean;
  proofSeen: boolean;
  admittedUs: boolean;
  /** Channel has 'bufferedamountlow' (browsers) or must be polled (wrtc). */
  lowEvents: boolean;
  queue: Uint8Array[];
  queuedBytes: number;
  /** Low-water marks of pending waitForBufferedBelow calls (to aim the bufferedamountlow threshold). */
  lows: number[];
  poll: ReturnType<typeof setTimeout> | null;
  bytesSent: number;
  bytesReceived: number;
  rejected: number;
  rtt: RttEstimator;
  pingSeq: number;
  createdAt: number;
  lastSeen: number | null;
  /** Until when the peer announced it may be silent (a 'busy' message); 0: not announced. */
  quietUntil: number;
}

/** PeerJS's ESM build (the page) exports Peer by name; Node loads its CommonJS build, whose exports sit on `default`. */
export async function loadPeerClass(): Promise<typeof Peer> {
  const mod: { Peer?: typeof Peer; default?: unknown } = await import('peerjs');
  return mod.Peer ?? (mod.default as { Peer: typeof Peer }).Peer;
}

/**
 * PeerJS 1.5.5 reports a failed addIceCandidate through `connection.provider`, which is null once the
 * connection is closed, so a candidate still being applied when a connection closes (a duplicate
 * dial, a refused or timed-out link) becomes an unhandled rejection — fatal in Node. A candidate that
 * fails on a closed connection means nothing, so those failures are dropped here.
 */
export function guardLateCandidates(conn: DataConnection): void {
  const handle = conn.handleMessage.bind(conn);
  conn.handleMessage = (m) => handle(m).catch(() => {});
}

export function isArrayBuffer(x: unknown): x is ArrayBuffer {
  // Not `instanceof`: the buffer may come from another realm (a worker, the native wrtc binding).
  return Object.prototype.toString.call(x) === '[object ArrayBuffer]';
}

/** A fresh link over `conn`, not yet open. */
export function newLink(conn: DataConnection, outgoing: boolean): Link {
  return {
    peer: conn.peer,
    conn,
    outgoing,
    state: 'connecting',
    closed: false,
    role: null,
    nonce: randomBytes(NONCE_BYTES),
    pake: null,
    isk: null,
    controlChain: Promise.resolve(),
    verified: false,
    proofSeen: false,
    admittedUs: false,
    lowEvents: false,
    queue: [],
    queuedBytes: 0,
    lows: [],
    poll: null,
    bytesSent: 0,
    bytesReceived: 0,
    rejected: 0,
    rtt: new RttEstimator(),
    pingSeq: 0,
    createdAt: Date.now(),
    lastSeen: null,
    quietUntil: 0,
  };
}

/** Closes a link's connection and releases what it holds (its send queue, drain timer and waiters' marks). */
export function releaseLink(link: Link): void {
  link.closed = true;
  if (link.poll) clearTimeout(link.poll);
  link.poll = null;
  link.queue = [];
  link.queuedBytes = 0;
  link.lows = [];
  link.conn.close();
}

/** The roster: this member (`self`, with its bytes over all links, departed ones included) and each link, admitted or not yet. */
export function linkRoster(self: PeerId, role: PeerRole, wire: { sent: number; received: number }, links: Iterable<Link>): RosterEntry[] {
  const all = [...links];
  const ranks = ranksOf([self, ...all.filter((l) => l.state === 'admitted').map((l) => l.peer)]);
  const me: RosterEntry = {
    id: self,
    self: true,
    role,
    rank: ranks.get(self)!,
    state: 'admitted',
    rttMs: null,
    bytesSent: wire.sent,
    bytesReceived: wire.received,
    rejected: 0,
    lastSeen: null,
  };
  const others = all.map(
    (l): RosterEntry => ({
      id: l.peer,
      self: false,
      role: l.role,
      rank: ranks.get(l.peer) ?? -1,
      state: l.state,
      rttMs: l.rtt.ms,
      bytesSent: l.bytesSent,
      bytesReceived: l.bytesReceived,
      rejected: l.rejected,
      lastSeen: l.lastSeen,
    }),
  );
  return [me, ...others];
}
