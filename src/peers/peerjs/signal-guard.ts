/**
 * A guard in front of PeerJS 1.5.5's handler of PeerServer messages. The server relays whatever any
 * registered client sends, and PeerJS trusts it: an OFFER without a payload or with an unknown
 * serialization throws inside its websocket handler (fatal in Node), and it keeps every message
 * for an unknown connection id forever. So every relayed message is checked here, against the
 * shapes PeerJS itself sends, before PeerJS sees it:
 * - OFFERs only from ids the transport accepts (a member id of this room with a valid link mark,
 *   while it has room for another link), within a per-remote rate: no WebRTC is set up otherwise;
 * - ANSWER/CANDIDATE for known connections only, candidates capped per connection; messages for
 *   unknown connection ids go to PeerJS's store only within small bounds, oldest evicted.
 * Peer-level messages from the server itself (OPEN, ERROR, ID-TAKEN...) pass once well-formed.
 */
import type { Peer } from 'peerjs';
import { z } from 'zod';

/** Offers one remote may make per minute (a dial and a few re-dials). */
export const MAX_OFFERS_PER_MINUTE = 6;
/** ICE candidates one connection may receive (host candidates on a LAN are a handful). */
export const MAX_CANDIDATES_PER_CONNECTION = 64;
/** Messages kept for connection ids PeerJS does not know (yet): per id, and ids in all. */
export const MAX_STORED_PER_CONNECTION = 8;
export const MAX_STORED_CONNECTIONS = 16;
/** Remotes whose offer rate is tracked at once (the oldest is forgotten beyond this). */
const MAX_TRACKED_REMOTES = 1024;
const MAX_SDP = 16 * 1024;

const id = z.string().min(1).max(64);
const connectionId = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/);
const sdp = (type: 'offer' | 'answer') => z.object({ type: z.literal(type), sdp: z.string().max(MAX_SDP) });
const Offer = z.object({
  type: z.literal('OFFER'),
  src: id,
  payload: z.object({
    connectionId,
    type: z.literal('data'),
    serialization: z.literal('raw'),
    reliable: z.boolean(),
    label: z.string().max(64),
    sdp: sdp('offer'),
    metadata: z.null().optional(),
  }),
});
const Answer = z.object({ type: z.literal('ANSWER'), src: id, payload: z.object({ connectionId, type: z.literal('data'), sdp: sdp('answer') }) });
const Candidate = z.object({
  type: z.literal('CANDIDATE'),
  src: id,
  payload: z.object({
    connectionId,
    type: z.literal('data'),
    candidate: z.object({
      candidate: z.string().max(1024),
      sdpMid: z.string().max(64).nullish(),
      sdpMLineIndex: z.number().int().min(0).max(64).nullish(),
      usernameFragment: z.string().max(256).nullish(),
    }),
  }),
});
const FromPeer = z.object({ type: z.enum(['LEAVE', 'EXPIRE']), src: id });
const FromServer = z.object({ type: z.enum(['OPEN', 'HEARTBEAT', 'ID-TAKEN', 'INVALID-KEY']) });
const ServerError = z.object({ type: z.literal('ERROR'), payload: z.object({ msg: z.string().max(1000) }) });

export interface SignalGuardOptions {
  /** Whether an offer from `src` may set up a connection now (room membership, capacity, backoff). */
  acceptOffer(src: string): boolean;
  /** A dropped message, for the transport's (rate-limited) problem reports. */
  dropped(src: string | null, reason: string): void;
}

/** The PeerJS internals the guard wraps (instance methods, present in 1.5.5). */
interface PeerInternals {
  _handleMessage(m: unknown): void;
  _storeMessage(connectionId: string, m: unknown): void;
  _lostMessages: Map<string, unknown[]>;
  getConnection(peer: string, connectionId: string): { peerConnection: unknown } | null;
}

/** Installs the guard on a freshly made Peer (before its socket delivers anything). */
export function guardSignalling(peer: Peer, o: SignalGuardOptions): void {
  const p = peer as unknown as PeerInternals;
  if (typeof p._handleMessage !== 'function' || typeof p._storeMessage !== 'function' || !(p._lostMessages instanceof Map)) {
    throw new Error('peerjs: this PeerJS version lacks the internals the signalling guard wraps (written for 1.5.5)');
  }
  const handle = p._handleMessage.bind(p);
  const offers = new Map<string, number[]>();
  const candidates = new Map<string, number>();

  const offerAllowed = (src: string): boolean => {
    const now = Date.now();
    const times = (offers.get(src) ?? []).filter((t) => now - t < 60_000);
    offers.delete(src); // re-inserted last: the Map stays ordered by recent use
    if (times.length >= MAX_OFFERS_PER_MINUTE) {
      offers.set(src, times);
      return false;
    }
    times.push(now);
    offers.set(src, times);
    if (offers.size > MAX_TRACKED_REMOTES) offers.delete(offers.keys().next().value!);
    return true;
  };

  p._handleMessage = (raw: unknown) => {
    const src = typeof (raw as { src?: unknown })?.src === 'string' ? ((raw as { src: string }).src.slice(0, 64)) : null;
    const drop = (why: string) => o.dropped(src, why);
    try {
      const type = (raw as { type?: unknown })?.type;
      if (type === 'OFFER') {
        const m = Offer.safeParse(raw);
        if (!m.success) return drop(`malformed OFFER (${m.error.issues[0]?.path.join('.')}: ${m.error.issues[0]?.message})`);
        if (!o.acceptOffer(m.data.src)) return drop('OFFER from an id this member does not take connections from now');
        if (!offerAllowed(m.data.src)) return drop(`more than ${MAX_OFFERS_PER_MINUTE} OFFERs in a minute`);
        return handle(m.data);
      }
      if (type === 'ANSWER' || type === 'CANDIDATE') {
        const m = (type === 'ANSWER' ? Answer : Candidate).safeParse(raw);
        if (!m.success) return drop(`malformed ${type} (${m.error.issues[0]?.path.join('.')}: ${m.error.issues[0]?.message})`);
        const cid = m.data.payload.connectionId;
        if (type === 'CANDIDATE') {
          const key = `${m.data.src}\0${cid}`;
          const n = (candidates.get(key) ?? 0) + 1;
          candidates.delete(key);
          candidates.set(key, n);
          if (candidates.size > MAX_TRACKED_REMOTES) candidates.delete(candidates.keys().next().value!);
          if (n > MAX_CANDIDATES_PER_CONNECTION) return drop(`more than ${MAX_CANDIDATES_PER_CONNECTION} candidates for one connection`);
        }
        return handle(m.data);
      }
      const m = FromPeer.safeParse(raw);
      if (m.success) return handle(m.data);
      if (FromServer.safeParse(raw).success || ServerError.safeParse(raw).success) return handle(raw);
      return drop(`unexpected message type ${JSON.stringify(String(type)).slice(0, 40)}`);
    } catch (e) {
      // PeerJS threw on a message that passed the checks: reported, never fatal.
      return drop(`PeerJS failed on it: ${e instanceof Error ? e.message : String(e)}`);
    }
  };

  // Messages for connections PeerJS does not know: kept within bounds (PeerJS keeps them all, forever).
  p._storeMessage = (cid: string, m: unknown) => {
    const lost = p._lostMessages;
    const list = lost.get(cid);
    if (list) {
      if (list.length >= MAX_STORED_PER_CONNECTION) return o.dropped(null, `over ${MAX_STORED_PER_CONNECTION} messages for unknown connection ${cid}`);
      list.push(m);
      return;
    }
    while (lost.size >= MAX_STORED_CONNECTIONS) lost.delete(lost.keys().next().value!);
    lost.set(cid, [m]);
  };
}
