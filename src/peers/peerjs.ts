/**
 * The Transport over WebRTC data channels brokered by a PeerJS PeerServer: one reliable, ordered
 * DataConnection ('raw' serialization, ArrayBuffers both ways) to every member of the room, a full mesh.
 *
 * Joining: the peer registers `<room tag>-<random>-<mark>` (src/peers/room.ts) with the PeerServer,
 * reads the room's listing (GET <path>/peerjs/rooms/<discovery key>), and dials every member id of the
 * room in it; members that join later dial it. Every PeerServer message passes the signalling guard
 * (src/peers/signal-guard.ts) before PeerJS sees it. Two members dialling each other at once keep the connection dialled by the
 * smaller id (both sides apply the same rule). No member is special for the mesh: the group survives
 * any member leaving, the room's creator included ('host' is only a role shown in the roster).
 *
 * Admission: on open, each side sends a hello with a fresh nonce; once it has the other's, it sends
 * its PAKE share (src/peers/pake.ts, on the room key: room id + optional passphrase, never sent),
 * then its key confirmation. A side that verifies the other's confirmation sends 'admit' (with its
 * role: nothing about a member leaves before the other side proved the room key); a link is
 * admitted once both sides have admitted each other, and only then does it carry data or count
 * among peers(). A failed proof gets a 'deny', both sides report it (onProblem), and the connection
 * is closed. Failed handshakes are rate-limited, and links not yet admitted are capped.
 *
 * Wire: byte 0 is the kind — 0: a Transport message (the rest, ≤ MAX_TRANSPORT_MESSAGE bytes),
 * 1: a control message (UTF-8 JSON ≤ 4 KiB: hello, share, proof, admit, deny, ping, pong, bye). Every
 * received message is checked (type, size, schema, admission); a bad one is counted, reported
 * (rate-limited per remote) and dropped, never thrown.
 *
 * Liveness: every member pings each admitted peer every heartbeatMs; any message counts as a sign of
 * life; a peer silent for peerTimeoutMs is dropped (onPeerLeave), as is a link that is not admitted
 * within handshakeTimeoutMs. The heartbeat RTT includes queueing behind data (what a collective sees).
 *
 * Backpressure: the transport lets each data channel hold up to CHANNEL_HIGH_WATER bytes (option
 * channelHighWater) and queues the rest itself, so bufferedAmount(peer) (queue +
 * RTCDataChannel.bufferedAmount) counts every byte not yet handed to the network. Drains are
 * observed with 'bufferedamountlow' where the channel has it (browsers); Node's @roamhq/wrtc exposes
 * only bufferedAmount, so there the transport polls.
 *
 * In Node, call installNodeWebRtc() (src/peers/node-webrtc.ts) before the first open().
 */
import type { DataConnection, Peer } from 'peerjs';
import { z } from 'zod';
import { PerKeyRateLimit } from './log-limit';
import { ControlMessage, type DenyReason, guardLateCandidates, isArrayBuffer, type Link, loadPeerClass, newLink } from './peerjs-link';
import { PakeSession } from './pake';
import {
  deriveRoomKey,
  fromBase64,
  isMemberId,
  isRoomId,
  memberId,
  NONCE_BYTES,
  type PeerServerAddress,
  peerListUrl,
  roomDiscoveryKey,
  tagOfDiscoveryKey,
  toBase64,
} from './room';
import { type PeerRole, ranksOf, type RosterEntry } from './roster';
import { guardSignalling } from './signal-guard';
import {
  BufferWaiters,
  emptyStats,
  Listeners,
  MAX_TRANSPORT_MESSAGE,
  type MessageHandler,
  type PeerHandler,
  type PeerId,
  type Transport,
  type TransportStats,
  type Unsubscribe,
} from './transport';

export const PEERJS_PROTOCOL_VERSION = 2;
const KIND_DATA = 0;
const KIND_CONTROL = 1;
const MAX_CONTROL_BYTES = 4096;
/** Bytes a data channel may hold before the transport queues (below PeerJS's own 8 MiB buffering). */
export const CHANNEL_HIGH_WATER = 4 * 1024 * 1024;
/** A send queue beyond this means the caller ignores backpressure: send() throws rather than hoard memory. */
const MAX_QUEUED_BYTES = 64 * 1024 * 1024;
/** Drain polling where the channel has no 'bufferedamountlow' (wrtc), and a safety net where it has. */
const POLL_MS_NO_EVENTS = 2;
const POLL_MS_WITH_EVENTS = 250;
/** Failed connections to a listed member are retried this many times, after 2, 4, 8... s. */
const MAX_DIAL_ATTEMPTS = 5;
/** A denied peer gets this long to receive the 'deny' before the connection closes. */
const DENY_GRACE_MS = 250;
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
   * ICE servers. Default none: host candidates only, enough on one machine or a LAN and contacting
   * nothing outside; add STUN/TURN servers for peers behind different NATs.
   */
  iceServers?: RTCIceServer[];
  /** How long open() waits for the PeerServer (default 10 000 ms). */
  connectTimeoutMs?: number;
  /** PeerJS log level 0–3 (default 0). */
  debug?: 0 | 1 | 2 | 3;
  /** Bytes a data channel may hold before the transport queues the rest itself (default CHANNEL_HIGH_WATER). */
  channelHighWater?: number;
}

export type PeerProblemKind = 'auth-failed' | 'denied' | 'bad-message' | 'timeout' | 'connection' | 'server';

/** Something that went wrong with a peer or the server; the transport keeps running. */
export interface PeerProblem {
  kind: PeerProblemKind;
  peer?: PeerId;
  message: string;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export class PeerJsTransport implements Transport {
  readonly stats: TransportStats = emptyStats();
  private readonly links = new Map<PeerId, Link>();
  /** Peers that were admitted and then left: a returning member joins under a new id. */
  private readonly departed = new Set<PeerId>();
  /** Ids that refused us or that we refused (passphrase, protocol), or gone: not dialled again, their offers refused. */
  private readonly noRedial = new Set<PeerId>();
  /**
   * Ids whose connection failed or timed out, with when they may be dialled again: a peer that was
   * busy (e.g. compiling GPU pipelines, which blocks its event loop) gets more chances, with backoff.
   */
  private readonly redial = new Map<PeerId, { at: number; attempts: number }>();
  private readonly waiters = new BufferWaiters();
  private readonly msg = new Listeners<[PeerId, Uint8Array]>();
  private readonly join = new Listeners<[PeerId]>();
  private readonly leave = new Listeners<[PeerId]>();
  private readonly problems = new Listeners<[PeerProblem]>();
  /** Fires on any change of a link's state (whenAdmitted listens). */
  private readonly changed = new Listeners<[]>();
  private readonly timers: ReturnType<typeof setInterval>[] = [];
  private readonly graceTimers = new Set<ReturnType<typeof setTimeout>>();
  private lastAuthProblem: string | null = null;
  /** When recent handshakes failed (MAX_AUTH_FAILURES_PER_MINUTE). */
  private authFailures: number[] = [];
  private readonly reports = new PerKeyRateLimit();
  /** Bytes on all data channels, departed peers included (the roster's own line). */
  private readonly wire = { sent: 0, received: 0 };
  private closed = false;
  private readonly o: Required<Omit<PeerJsTransportOptions, 'passphrase' | 'server' | 'room' | 'role' | 'iceServers' | 'debug' | 'connectTimeoutMs'>>;

  /** Registers with the PeerServer, reads its listing and dials the room's members. */
  static async open(opts: PeerJsTransportOptions): Promise<PeerJsTransport> {
    if (!isRoomId(opts.room)) throw new Error(`not a room id: '${opts.room}'`);
    const hw = opts.channelHighWater;
    if (hw !== undefined && !(Number.isSafeInteger(hw) && hw >= 1)) throw new Error(`channelHighWater must be a positive whole number of bytes, not ${hw}`);
    if (typeof RTCPeerConnection === 'undefined') {
      throw new Error('WebRTC is not available here; in Node, call installNodeWebRtc() (src/peers/node-webrtc.ts) before opening a PeerJS transport');
    }
    const passphrase = opts.passphrase ?? '';
    const [PeerClass, key] = await Promise.all([loadPeerClass(), deriveRoomKey(opts.room, passphrase)]);
    const discovery = roomDiscoveryKey(opts.room);
    const id = memberId(discovery);
    const s = opts.server;
    const peer = new PeerClass(id, {
      host: s.host,
      port: s.port,
      path: s.path,
      secure: s.secure,
      key: s.key,
      config: { iceServers: opts.iceServers ?? [] },
      debug: opts.debug ?? 0,
    });
    // Installed before the socket delivers anything; the transport takes over once it exists.
    const gate: { t: PeerJsTransport | null } = { t: null };
    guardSignalling(peer, {
      acceptOffer: (src) => gate.t?.acceptOffer(src) ?? false,
      dropped: (src, reason) => gate.t?.problem({ kind: 'bad-message', peer: src ?? undefined, message: `dropped a PeerServer message${src ? ` from ${src}` : ''}: ${reason}` }),
    });
    const waitMs = opts.connectTimeoutMs ?? 10_000;
    try {
      await new Promise<void>((resolve, reject) => {
        const settle = (e: Error | null) => {
          clearTimeout(timer);
          peer.off('open', opened);
          peer.off('error', failed);
          if (e) reject(e);
          else resolve();
        };
        const opened = () => settle(null);
        const failed = (e: Error) => settle(new Error(`could not register with the PeerServer at ${s.url}: ${e.message}`));
        const timer = setTimeout(() => settle(new Error(`no answer from the PeerServer at ${s.url} within ${waitMs / 1000} s`)), waitMs);
        peer.on('open', opened);
        peer.on('error', failed);
      });
    } catch (e) {
      peer.destroy();
      throw e;
    }
    const t = new PeerJsTransport(peer, id, opts, key, discovery);
    gate.t = t;
    try {
      await t.discover();
    } catch (e) {
      t.close();
      throw e;
    }
    return t;
  }

  private constructor(
    private readonly peer: Peer,
    /** This member's PeerJS id (kept here: PeerJS forgets it while disconnected from the server). */
    readonly id: PeerId,
    opts: PeerJsTransportOptions,
    private readonly key: Uint8Array,
    /** The room's discovery key (src/peers/room.ts): lists the room and checks member ids. */
    private readonly discovery: string,
  ) {
    this.tag = tagOfDiscoveryKey(discovery);
    this.room = opts.room;
    this.server = opts.server;
    this.role = opts.role ?? 'peer';
    this.o = {
      heartbeatMs: opts.heartbeatMs ?? 1000,
      peerTimeoutMs: opts.peerTimeoutMs ?? 10_000,
      handshakeTimeoutMs: opts.handshakeTimeoutMs ?? 10_000,
      discoveryIntervalMs: opts.discoveryIntervalMs ?? 3000,
      channelHighWater: opts.channelHighWater ?? CHANNEL_HIGH_WATER,
    };
    peer.on('connection', (conn) => this.incoming(conn));
    peer.on('error', (e) => this.peerError(e.type, e.message));
    peer.on('disconnected', () => {
      if (this.closed) return;
      // Lost the signalling server: links keep working, but nobody new can reach us until we are back.
      this.problem({ kind: 'server', message: `lost the PeerServer at ${this.server.url}; reconnecting` });
      const t = setTimeout(() => {
        this.graceTimers.delete(t);
        if (!this.closed && this.peer.disconnected && !this.peer.destroyed) this.peer.reconnect();
      }, 1000);
      this.graceTimers.add(t);
    });
    this.timers.push(
      setInterval(() => this.heartbeat(), this.o.heartbeatMs),
      setInterval(() => {
        this.discover().catch((e: unknown) => this.problem({ kind: 'server', message: e instanceof Error ? e.message : String(e) }));
      }, this.o.discoveryIntervalMs),
    );
  }

  readonly room: string;
  readonly server: PeerServerAddress;
  readonly role: PeerRole;
  /** The room's tag (prefix of every member id). */
  readonly tag: string;

  /** Admitted peers (data may flow to and from them). */
  peers(): PeerId[] {
    return [...this.links.values()].filter((l) => l.state === 'admitted').map((l) => l.peer);
  }

  send(peer: PeerId, bytes: Uint8Array): void {
    if (this.closed) throw new Error(`peerjs ${this.id}: closed`);
    const link = this.links.get(peer);
    if (!link || link.state !== 'admitted') throw new Error(`peerjs ${this.id}: unknown peer ${peer}`);
    if (bytes.length > MAX_TRANSPORT_MESSAGE) throw new Error(`peerjs ${this.id}: message of ${bytes.length} B exceeds ${MAX_TRANSPORT_MESSAGE} B`);
    const wire = new Uint8Array(1 + bytes.length);
    wire[0] = KIND_DATA;
    wire.set(bytes, 1);
    this.enqueue(link, wire);
    this.stats.bytesSent += bytes.length;
    this.stats.messagesSent++;
  }

  bufferedAmount(peer: PeerId): number {
    const link = this.links.get(peer);
    return link ? link.queuedBytes + (link.conn.dataChannel?.bufferedAmount ?? 0) : 0;
  }

  waitForBufferedBelow(peer: PeerId, lowWater: number): Promise<void> {
    const link = this.links.get(peer);
    if (this.closed || !link || this.bufferedAmount(peer) <= lowWater) return Promise.resolve();
    link.lows.push(lowWater);
    const p = this.waiters.wait(peer, lowWater);
    this.armDrain(link);
    return p;
  }

  onMessage(h: MessageHandler): Unsubscribe {
    return this.msg.add(h);
  }
  onPeerJoin(h: PeerHandler): Unsubscribe {
    return this.join.add(h);
  }
  onPeerLeave(h: PeerHandler): Unsubscribe {
    return this.leave.add(h);
  }
  /** Authentication failures, rejected messages, timeouts, server trouble: reported, never thrown. */
  onProblem(h: (p: PeerProblem) => void): Unsubscribe {
    return this.problems.add(h);
  }

  /** This member and every peer it has a link with (admitted or not yet). */
  roster(): RosterEntry[] {
    const admitted = this.peers();
    const ranks = ranksOf([this.id, ...admitted]);
    const self: RosterEntry = {
      id: this.id,
      self: true,
      role: this.role,
      rank: ranks.get(this.id)!,
      state: 'admitted',
      rttMs: null,
      bytesSent: this.wire.sent,
      bytesReceived: this.wire.received,
      rejected: 0,
      lastSeen: null,
    };
    const others = [...this.links.values()].map(
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
    return [self, ...others];
  }

  /**
   * Resolves once this member is admitted by at least one peer (at once for the room's host).
   * Rejects with the reason when every peer it reached refused it (e.g. a wrong passphrase), when the
   * transport closes, or after timeoutMs.
   */
  whenAdmitted(timeoutMs = 30_000): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const finish = (e: Error | null) => {
        clearTimeout(timer);
        unsubscribe();
        if (e) reject(e);
        else resolve();
      };
      const check = () => {
        if (this.closed) return finish(new Error('the transport was closed before it was admitted'));
        if (this.role === 'host' || this.peers().length > 0) return finish(null);
        if (this.lastAuthProblem !== null && this.links.size === 0) return finish(new Error(this.lastAuthProblem));
      };
      const timer = setTimeout(() => {
        const found = new Set([...this.links.keys(), ...this.redial.keys()]).size;
        const why = this.lastAuthProblem ?? (found === 0 ? 'no other member of the room was found on the PeerServer' : `${found} member(s) found, none completed the handshake`);
        finish(new Error(`not admitted to the room within ${timeoutMs / 1000} s: ${why}`));
      }, timeoutMs);
      const unsubscribe = this.changed.add(check);
      check();
    });
  }

  /** Bytes held in the transport's own queue to `peer`, not yet handed to the data channel (diagnostics). */
  queuedBytes(peer: PeerId): number {
    return this.links.get(peer)?.queuedBytes ?? 0;
  }

  /** The data channel to `peer`, for diagnostics and for fuzz tests that bypass the transport's own checks. */
  dataChannel(peer: PeerId): RTCDataChannel | undefined {
    return this.links.get(peer)?.conn.dataChannel ?? undefined;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const t of this.timers) clearInterval(t);
    for (const t of this.graceTimers) clearTimeout(t);
    this.graceTimers.clear();
    for (const link of this.links.values()) {
      // Best effort: the channel closing tells the peer anyway.
      if (link.state === 'admitted') this.trySendControl(link, { t: 'bye' });
      this.shut(link);
    }
    this.links.clear();
    this.peer.destroy();
    this.waiters.wake(() => true);
    this.changed.emit();
    for (const l of [this.msg, this.join, this.leave, this.problems, this.changed]) l.clear();
  }

  // ---- discovery and connections -------------------------------------------------------------

  /** Reads the server's listing and dials the room's members we have no link with. */
  private async discover(): Promise<void> {
    if (this.closed) return;
    const url = peerListUrl(this.server, this.discovery);
    let res: Response;
    try {
      res = await fetch(url);
    } catch (e) {
      throw new Error(`could not read the peer listing at ${url}: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (res.status === 404) throw new Error(`the PeerServer at ${this.server.url} has no room listing (it must be this lab's embedded server, or one with its /rooms/ route)`);
    if (!res.ok) throw new Error(`the peer listing at ${url} answered HTTP ${res.status}`);
    const ids = z.array(z.unknown()).max(10_000).safeParse(await res.json().catch(() => null));
    if (!ids.success) throw new Error(`the peer listing at ${url} is not a list`);
    // Entries that are not member ids of this room are skipped one by one: one bad id blocks nobody.
    for (const id of ids.data) {
      if (this.closed) return;
      if (typeof id !== 'string' || id === this.id || !isMemberId(id, this.discovery)) continue;
      if (this.links.has(id) || this.departed.has(id) || this.noRedial.has(id)) continue;
      if ((this.redial.get(id)?.at ?? 0) > Date.now()) continue;
      if (!this.roomForLink()) return;
      this.dial(id);
    }
  }

  /** Whether another link not yet admitted may start now (capacity, failed-handshake rate). */
  private roomForLink(): boolean {
    const now = Date.now();
    this.authFailures = this.authFailures.filter((t) => now - t < 60_000);
    if (this.authFailures.length >= MAX_AUTH_FAILURES_PER_MINUTE) return false;
    let pending = 0;
    for (const l of this.links.values()) if (l.state !== 'admitted') pending++;
    return pending < MAX_UNADMITTED_LINKS;
  }

  /** The signalling guard's question: may an offer from `src` set up a connection now? */
  private acceptOffer(src: string): boolean {
    if (this.closed || !isMemberId(src, this.discovery) || this.departed.has(src) || this.noRedial.has(src)) return false;
    const existing = this.links.get(src);
    if (existing?.state === 'admitted') return true; // a re-dial of a live link: incoming() decides
    return existing !== undefined || this.roomForLink();
  }

  private dial(peer: PeerId): void {
    const conn = this.peer.connect(peer, { serialization: 'raw', reliable: true });
    if (!conn) return; // disconnected from the server: PeerJS reported it as an error already
    guardLateCandidates(conn);
    this.attach(conn, true);
  }

  private incoming(conn: DataConnection): void {
    guardLateCandidates(conn);
    const peer = conn.peer;
    const refuse = (why: string) => {
      this.problem({ kind: 'connection', peer, message: `refused a connection from ${peer}: ${why}` });
      this.later(() => conn.close(), 0);
    };
    if (this.closed) return this.later(() => conn.close(), 0);
    if (!isMemberId(peer, this.discovery)) return refuse('not a member id of this room');
    if (this.departed.has(peer)) return refuse('it left the group earlier');
    if (conn.serialization !== 'raw' || !conn.reliable) return refuse(`it asked for ${conn.reliable ? '' : 'unreliable, '}'${conn.serialization}' serialization, not reliable 'raw'`);
    const existing = this.links.get(peer);
    if (existing) {
      // Both dialled at once: keep the connection dialled by the smaller id (the peer applies the same
      // rule); a second dial from the same side replaces its first (which may be dead).
      const keepNew = !existing.outgoing || peer < this.id;
      if (existing.state === 'admitted' || !keepNew) return this.later(() => conn.close(), 0);
      existing.closed = true;
      this.shut(existing);
      this.links.delete(peer);
    }
    this.attach(conn, false);
  }

  private attach(conn: DataConnection, outgoing: boolean): void {
    const link = newLink(conn, outgoing);
    this.links.set(link.peer, link);
    conn.on('open', () => this.opened(link));
    conn.on('data', (d) => this.received(link, d));
    conn.on('close', () => this.drop(link, { kind: 'connection', peer: link.peer, message: `connection to ${link.peer} closed` }));
    conn.on('error', (e) => this.drop(link, { kind: 'connection', peer: link.peer, message: `connection to ${link.peer} failed: ${e.message}` }));
    if (conn.open) this.opened(link);
    this.changed.emit();
  }

  private opened(link: Link): void {
    if (link.closed || link.state !== 'connecting') return;
    link.state = 'authenticating';
    const dc = link.conn.dataChannel;
    link.lowEvents = typeof dc.bufferedAmountLowThreshold === 'number';
    if (link.lowEvents) dc.addEventListener('bufferedamountlow', () => this.pump(link));
    this.sendControl(link, { t: 'hello', v: PEERJS_PROTOCOL_VERSION, nonce: toBase64(link.nonce) });
    this.changed.emit();
  }

  // ---- receiving -------------------------------------------------------------------------------

  private received(link: Link, data: unknown): void {
    if (link.closed || this.closed) return;
    try {
      if (!isArrayBuffer(data)) return this.reject(link, `not binary (${typeof data})`);
      const bytes = new Uint8Array(data);
      link.bytesReceived += bytes.length;
      this.wire.received += bytes.length;
      if (bytes.length === 0) return this.reject(link, 'empty message');
      if (bytes[0] === KIND_DATA) {
        if (bytes.length - 1 > MAX_TRANSPORT_MESSAGE) return this.reject(link, `oversized message (${bytes.length - 1} B > ${MAX_TRANSPORT_MESSAGE} B)`);
        if (link.state !== 'admitted') return this.reject(link, 'data before admission');
        link.lastSeen = Date.now();
        this.stats.bytesReceived += bytes.length - 1;
        this.stats.messagesReceived++;
        return this.msg.emit(link.peer, bytes.subarray(1));
      }
      if (bytes[0] !== KIND_CONTROL) return this.reject(link, `unknown message kind ${bytes[0]}`);
      if (bytes.length - 1 > MAX_CONTROL_BYTES) return this.reject(link, `oversized control message (${bytes.length - 1} B)`);
      let json: unknown;
      try {
        json = JSON.parse(decoder.decode(bytes.subarray(1)));
      } catch {
        return this.reject(link, 'control message is not JSON');
      }
      const m = ControlMessage.safeParse(json);
      if (!m.success) return this.reject(link, `malformed control message (${m.error.issues[0]?.message ?? 'invalid'})`);
      link.lastSeen = Date.now();
      const msg = m.data;
      link.controlChain = link.controlChain
        .then(() => (link.closed || this.closed ? undefined : this.control(link, msg)))
        .catch((e: unknown) => this.reject(link, `control handler failed: ${String(e)}`));
    } catch (e) {
      this.reject(link, `internal error: ${String(e)}`);
    }
  }

  private async control(link: Link, m: ControlMessage): Promise<void> {
    switch (m.t) {
      case 'hello': {
        if (link.pake !== null) return this.reject(link, 'second hello');
        if (m.v !== PEERJS_PROTOCOL_VERSION) return this.deny(link, 'protocol', `protocol version ${m.v}; this peer speaks ${PEERJS_PROTOCOL_VERSION}`);
        const nonce = fromBase64(m.nonce);
        if (!nonce || nonce.length !== NONCE_BYTES) return this.deny(link, 'protocol', 'malformed challenge');
        link.pake = new PakeSession(this.key, this.id, link.peer, link.nonce, nonce);
        return this.sendControl(link, { t: 'share', y: toBase64(link.pake.share) });
      }
      case 'share': {
        if (!link.pake) return this.deny(link, 'protocol', 'PAKE share before hello');
        if (link.isk) return this.reject(link, 'second share');
        const y = fromBase64(m.y);
        const isk = y && link.pake.sessionKey(y);
        if (!isk) return this.deny(link, 'protocol', 'malformed PAKE share');
        link.isk = isk;
        return this.sendControl(link, { t: 'proof', mac: toBase64(link.pake.confirm(isk)) });
      }
      case 'proof': {
        if (!link.pake || !link.isk) return this.deny(link, 'protocol', 'key confirmation before the PAKE share');
        if (link.proofSeen) return this.reject(link, 'second proof');
        link.proofSeen = true;
        const mac = fromBase64(m.mac);
        if (mac === null || !link.pake.verify(link.isk, mac)) {
          const message = this.authFailureText(link);
          this.lastAuthProblem = message;
          this.authFailures.push(Date.now());
          this.problem({ kind: 'auth-failed', peer: link.peer, message });
          return this.deny(link, 'passphrase', 'its proof of the room key did not verify');
        }
        link.verified = true;
        // The role goes only to a peer that proved the room key.
        this.sendControl(link, { t: 'admit', role: this.role });
        return this.maybeAdmit(link);
      }
      case 'admit':
        if (!link.verified) return this.deny(link, 'protocol', 'admit before its proof of the room key');
        link.role = m.role;
        link.admittedUs = true;
        return this.maybeAdmit(link);
      case 'deny': {
        const message =
          m.reason === 'passphrase'
            ? `wrong passphrase: peer ${link.peer} refused this peer's proof of the room key`
            : `peer ${link.peer} refused this peer (${m.reason}): ${m.detail}`;
        if (m.reason === 'passphrase') this.lastAuthProblem = message;
        if (m.reason !== 'timeout') this.noRedial.add(link.peer);
        return this.drop(link, { kind: 'denied', peer: link.peer, message });
      }
      case 'ping':
        return this.sendControl(link, { t: 'pong', n: m.n, ts: m.ts });
      case 'pong': {
        const rtt = performance.now() - m.ts;
        if (rtt >= 0 && rtt < 600_000) link.rtt.sample(rtt);
        return;
      }
      case 'bye':
        return this.drop(link, null);
    }
  }

  /**
   * Why a peer's proof failed, in the words a user can act on. (Whether either side has a passphrase
   * is not told before the proof, so it can't be said which side lacks one.)
   */
  private authFailureText(link: Link): string {
    return `wrong passphrase: peer ${link.peer} proved a different room key (a different passphrase, or none where the other side has one)`;
  }

  private maybeAdmit(link: Link): void {
    if (link.closed || link.state === 'admitted' || !link.verified || !link.admittedUs) return;
    link.state = 'admitted';
    link.lastSeen = Date.now();
    this.redial.delete(link.peer);
    this.lastAuthProblem = null;
    this.join.emit(link.peer);
    this.changed.emit();
  }

  private reject(link: Link, reason: string): void {
    link.rejected++;
    this.problem({ kind: 'bad-message', peer: link.peer, message: `rejected a message from ${link.peer}: ${reason}` });
  }

  // ---- sending and backpressure ----------------------------------------------------------------

  private sendControl(link: Link, m: ControlMessage): void {
    const body = encoder.encode(JSON.stringify(m));
    const wire = new Uint8Array(1 + body.length);
    wire[0] = KIND_CONTROL;
    wire.set(body, 1);
    this.enqueue(link, wire);
  }

  /** sendControl where failure does not matter (closing). */
  private trySendControl(link: Link, m: ControlMessage): void {
    try {
      this.sendControl(link, m);
    } catch {
      // the link is going away anyway
    }
  }

  private enqueue(link: Link, wire: Uint8Array): void {
    if (link.queuedBytes + wire.length > MAX_QUEUED_BYTES) {
      throw new Error(`peerjs ${this.id}: send queue to ${link.peer} is over ${MAX_QUEUED_BYTES} B (wait for bufferedAmount to drain)`);
    }
    link.queue.push(wire);
    link.queuedBytes += wire.length;
    this.pump(link);
  }

  /** Moves queued messages into the channel up to its high-water mark, then wakes drained waiters. */
  private pump(link: Link): void {
    if (link.closed || link.state === 'connecting') return;
    const dc = link.conn.dataChannel;
    let sent = 0;
    while (sent < link.queue.length && dc.bufferedAmount < this.o.channelHighWater) {
      const m = link.queue[sent++];
      link.queuedBytes -= m.length;
      link.bytesSent += m.length;
      this.wire.sent += m.length;
      link.conn.send(m);
      if (link.closed) return; // PeerJS closes the connection when the channel refuses a message
    }
    link.queue.splice(0, sent);
    const buffered = this.bufferedAmount(link.peer);
    this.waiters.wake((w) => w.peer === link.peer && buffered <= w.low);
    link.lows = link.lows.filter((l) => buffered > l);
    this.armDrain(link);
  }

  /** Arranges for pump() to run again once the channel drains, while anything waits on it. */
  private armDrain(link: Link): void {
    if (link.closed || link.state === 'connecting' || (link.queue.length === 0 && link.lows.length === 0)) return;
    if (link.lowEvents) {
      link.conn.dataChannel.bufferedAmountLowThreshold = link.queue.length > 0 ? this.o.channelHighWater / 2 : Math.max(...link.lows);
    }
    link.poll ??= setTimeout(
      () => {
        link.poll = null;
        this.pump(link);
      },
      link.lowEvents ? POLL_MS_WITH_EVENTS : POLL_MS_NO_EVENTS,
    );
  }

  // ---- liveness and teardown -------------------------------------------------------------------

  private heartbeat(): void {
    const now = Date.now();
    for (const link of [...this.links.values()]) {
      if (link.state === 'admitted') {
        const silent = now - (link.lastSeen ?? now);
        if (silent > this.o.peerTimeoutMs) {
          this.drop(link, { kind: 'timeout', peer: link.peer, message: `peer ${link.peer} silent for ${(silent / 1000).toFixed(1)} s: dropped` });
          continue;
        }
        this.trySendControl(link, { t: 'ping', n: link.pingSeq++, ts: performance.now() });
      } else if (now - link.createdAt > this.o.handshakeTimeoutMs) {
        const message = `no ${link.state === 'connecting' ? 'connection' : 'admission'} with ${link.peer} within ${this.o.handshakeTimeoutMs / 1000} s`;
        this.problem({ kind: 'timeout', peer: link.peer, message });
        if (link.state === 'authenticating') this.deny(link, 'timeout', message);
        else this.drop(link, null);
      }
    }
  }

  private deny(link: Link, reason: DenyReason, detail: string): void {
    this.trySendControl(link, { t: 'deny', reason, detail: detail.slice(0, 300) });
    if (reason !== 'timeout') this.noRedial.add(link.peer);
    // Give the deny time to arrive before the channel closes.
    this.drop(link, null, DENY_GRACE_MS);
  }

  /** Forgets a link; an admitted peer leaving fires onPeerLeave. Idempotent. */
  private drop(link: Link, problem: PeerProblem | null, closeDelayMs = 0): void {
    if (link.closed) return;
    link.closed = true;
    const wasAdmitted = link.state === 'admitted';
    if (this.links.get(link.peer) === link) this.links.delete(link.peer);
    if (closeDelayMs > 0) this.later(() => this.shut(link), closeDelayMs);
    else this.shut(link);
    if (this.closed) return;
    if (wasAdmitted) this.departed.add(link.peer);
    else if (!this.noRedial.has(link.peer)) this.scheduleRedial(link.peer);
    this.waiters.wake((w) => w.peer === link.peer);
    if (problem) this.problem(problem);
    if (wasAdmitted) this.leave.emit(link.peer);
    this.changed.emit();
  }

  private scheduleRedial(peer: PeerId): void {
    const attempts = (this.redial.get(peer)?.attempts ?? 0) + 1;
    if (attempts >= MAX_DIAL_ATTEMPTS) {
      this.redial.delete(peer);
      this.noRedial.add(peer);
    } else {
      this.redial.set(peer, { at: Date.now() + 1000 * 2 ** attempts, attempts });
    }
  }

  /** Closes a link's connection and releases what it holds. */
  private shut(link: Link): void {
    link.closed = true;
    if (link.poll) clearTimeout(link.poll);
    link.poll = null;
    link.queue = [];
    link.queuedBytes = 0;
    link.lows = [];
    link.conn.close();
  }

  private peerError(type: string, message: string): void {
    if (this.closed) return;
    if (type === 'peer-unavailable') {
      // The listing named a member that is gone (the server expires ids a little later).
      const id = /Could not connect to peer (\S+)/.exec(message)?.[1];
      const link = id ? this.links.get(id) : undefined;
      if (!link || link.state !== 'connecting') return;
      this.noRedial.add(link.peer);
      return this.drop(link, { kind: 'connection', peer: id, message: `peer ${id} is not on the PeerServer any more` });
    }
    // A failing link is reported through the link itself (close, error, handshake timeout); PeerJS's
    // Peer-level copy names no peer, and closing a duplicate dial mid-negotiation raises it harmlessly.
    if (type === 'webrtc') return;
    this.problem({ kind: 'server', message: `PeerServer ${this.server.url}: ${message} (${type})` });
  }

  /**
   * Reports a problem. Bad messages, which a remote can send by the thousand, are rate-limited per
   * remote (a few per 10 s, the rest counted into the next one); the other kinds are bounded by the
   * offer and handshake limits already.
   */
  private problem(p: PeerProblem): void {
    if (p.kind !== 'bad-message') return this.problems.emit(p);
    const { pass, suppressed } = this.reports.take(p.peer ?? '');
    if (!pass) return;
    this.problems.emit(suppressed > 0 ? { ...p, message: `${p.message} (${suppressed} more from ${p.peer ?? 'the server'} not shown)` } : p);
  }

  /** A timer that close() cancels. */
  private later(f: () => void, ms: number): void {
    const t = setTimeout(() => {
      this.graceTimers.delete(t);
      f();
    }, ms);
    this.graceTimers.add(t);
  }
}
