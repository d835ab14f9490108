/**
 * The PeerJS transport's options, limits and problem reports (src/peers/peerjs/peerjs.ts re-exports them),
 * in their own file so the transport's parts (wire, admission, discovery) share them without a cycle.
 */
import type { IceConfig } from '../transport/ice';
import { isRoomId, type PeerServerAddress } from '../room/room';
import type { PeerRole } from '../room/roster';
import type { PeerId } from '../transport/transport';

export const PEERJS_PROTOCOL_VERSION = 2;
/** Bytes a data channel may hold before the transport queues (below PeerJS's own 8 MiB buffering). */
export const CHANNEL_HIGH_WATER = 4 * 1024 * 1024;
/** Links not yet admitted, at most: more offers are refused before any WebRTC is set up, dials wait. */
export const MAX_UNADMITTED_LINKS = 8;
/** Failed handshakes per minute after which no new link is taken until the minute has passed (online guessing). */
export const MAX_AUTH_FAILURES_PER_MINUTE = 8;

export interface PeerJsTransportOptions {
  /** The room id (createRoomId()). */
  room: string;
  /** Optional passphrase every member must know (never sent). */
  passphrase?: string;
  /** The PeerServer (sameOriginServer(location.href), parseServerUrl(...)). */
  server: PeerServerAddress;
  /** 'host' for the member that created the room (shown in the roster). Default 'peer'. */
  role?: PeerRole;
  heartbeatMs?: number;
  /** A peer silent this long is dropped (default 10 000 ms). */
  peerTimeoutMs?: number;
  /** A link not admitted within this long is closed (default 10 000 ms). */
  handshakeTimeoutMs?: number;
  /** How often the server's listing is read again for members that were missed (default 3000 ms). */
  discoveryIntervalMs?: number;
  /**
   * ICE servers and policy (ice.ts parseIce). Default none: host candidates only, enough on one
   * machine or a LAN and contacting nothing outside; add STUN/TURN servers for peers behind NATs.
   */
  ice?: IceConfig;
  /**
   * Ask the PeerServer for TURN credentials once registered (its /lab-config.json said `turn`:
   * src/peers/peerjs/server-turn.ts) and use them beside `ice`. Default false.
   */
  turnFromServer?: boolean;
  /** How long open() waits for the PeerServer (default 10 000 ms). */
  connectTimeoutMs?: number;
  /** PeerJS log level 0–3 (default 0). */
  debug?: 0 | 1 | 2 | 3;
  /** Bytes a data channel may hold before the transport queues the rest itself (default CHANNEL_HIGH_WATER). */
  channelHighWater?: number;
}

/** The timing and buffering options the running transport reads, defaults filled in. */
export type PeerJsTunables = Required<Pick<PeerJsTransportOptions, 'heartbeatMs' | 'peerTimeoutMs' | 'handshakeTimeoutMs' | 'discoveryIntervalMs' | 'channelHighWater'>>;

export type PeerProblemKind = 'auth-failed' | 'denied' | 'bad-message' | 'timeout' | 'connection' | 'server';

/** Something that went wrong with a peer or the server; the transport keeps running. */
export interface PeerProblem {
  kind: PeerProblemKind;
  peer?: PeerId;
  message: string;
}

/** Throws on options open() cannot work with, before anything is set up. */
export function checkOptions(opts: PeerJsTransportOptions): void {
  if (!isRoomId(opts.room)) throw new Error(`not a room id: '${opts.room}'`);
  const hw = opts.channelHighWater;
  if (hw !== undefined && !(Number.isSafeInteger(hw) && hw >= 1)) throw new Error(`channelHighWater must be a positive whole number of bytes, not ${hw}`);
  if (typeof RTCPeerConnection === 'undefined') {
    throw new Error('WebRTC is not available here; in Node, call installNodeWebRtc() (src/peers/transport/node-webrtc.ts) before opening a PeerJS transport');
  }
}

export function tunables(opts: PeerJsTransportOptions): PeerJsTunables {
  return {
    heartbeatMs: opts.heartbeatMs ?? 1000,
    peerTimeoutMs: opts.peerTimeoutMs ?? 10_000,
    handshakeTimeoutMs: opts.handshakeTimeoutMs ?? 10_000,
    discoveryIntervalMs: opts.discoveryIntervalMs ?? 3000,
    channelHighWater: opts.channelHighWater ?? CHANNEL_HIGH_WATER,
  };
}
