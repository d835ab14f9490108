/**
 * The Transport over WebRTC data channels brokered by a PeerJS PeerServer: one reliable, ordered
 * DataConnection ('raw' serialization, ArrayBuffers both ways) to every member of the room, a full mesh.
 *
 * Joining: the peer registers `<room tag>-<random>-<mark>` (src/peers/room/room.ts) with the PeerServer,
 * reads the room's listing (src/peers/peerjs/discovery.ts), and dials every member id of the
 * room in it; members that join later dial it. Every PeerServer message passes the signalling guard
 * (src/peers/peerjs/signal-guard.ts) before PeerJS sees it. Two members dialling each other at once keep the connection dialled by the
 * smaller id (both sides apply the same rule). No member is special for the mesh: the group survives
 * any member leaving, the room's creator included ('host' is only a role shown in the roster).
 * Whom it dials (again, with backoff) and whose offers it takes: src/peers/peerjs/dial-policy.ts.
 *
 * Admission (src/peers/peerjs/admission.ts): a PAKE on the room key, then 'admit' both ways; only an
 * admitted link carries data or counts among peers().
 *
 * Wire and backpressure: src/peers/peerjs/wire.ts. Every received message is checked (type, size,
 * schema, admission); a bad one is counted, reported (rate-limited per remote) and dropped, never thrown.
 *
 * Liveness: every member pings each admitted peer every heartbeatMs; any message counts as a sign of
 * life; a peer silent for peerTimeoutMs is dropped (onPeerLeave), as is a link that is not admitted
 * within handshakeTimeoutMs (a peer that announced it is busy — announceBusy — not before that ends). The heartbeat RTT includes queueing behind data (what a collective sees).
 *
 * In Node, call installNodeWebRtc() (src/peers/transport/node-webrtc.ts) before the first open().
 */
import type { DataConnection, Peer } from 'peerjs';
import { PerKeyRateLimit } from './log-limit';
import { AdmissionLimits, type ControlHost, handleControl } from './admission';
import { DialPolicy } from './dial-policy';
import { listedMembers, newPeer, registered } from './discovery';
import { useServerTurn } from './server-turn';
import { Liveness, peerErrorMeaning } from './liveness';
import { type Identity, identityOf, newKeyPair } from '../room/identity';
import { type DenyReason, guardLateCandidates, isArrayBuffer, type Link, linkRoster, loadPeerClass, MAX_BUSY_MS, newLink, releaseLink } from './link';
import { checkOptions, PEERJS_PROTOCOL_VERSION, type PeerJsTransportOptions, type PeerJsTunables, type PeerProblem, tunables } from './options';
import { bufferedOn, dataFrame, readFrame, SendQueues } from './wire';
import { deriveRoomKey, isMemberId, memberId, memberIdBindsKey, type PeerServerAddress, roomDiscoveryKey, tagOfDiscoveryKey, toBase64 } from '../room/room';
import type { PeerRole, RosterEntry } from '../room/roster';
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
} from '../transport/transport';

// What callers import from here; the definitions sit with the parts of the transport that use them.
export {
  CHANNEL_HIGH_WATER,
  MAX_AUTH_FAILURES_PER_MINUTE,
  MAX_UNADMITTED_LINKS,
  PEERJS_PROTOCOL_VERSION,
  type PeerJsTransportOptions,
  type PeerProblem,
  type PeerProblemKind,
} from './options';

/** A denied peer gets this long to receive the 'deny' before the connection closes. */
const DENY_GRACE_MS = 250;

export class PeerJsTransport implements Transport {
  readonly stats: TransportStats = emptyStats();
  private readonly links = new Map<PeerId, Link>();
  /** Whom to dial, whose offers to take, and what a link's end means for the next dial. */
  private readonly dials: DialPolicy;
  private readonly waiters = new BufferWaiters();
  private readonly msg = new Listeners<[PeerId, Uint8Array]>();
  private readonly join = new Listeners<[PeerId]>();
  private readonly leave = new Listeners<[PeerId]>();
  private readonly problems = new Listeners<[PeerProblem]>();
  /** Fires on any change of a link's state (whenAdmitted listens). */
  private readonly changed = new Listeners<[]>();
  private readonly timers: ReturnType<typeof setInterval>[] = [];
  private readonly graceTimers = new Set<ReturnType<typeof setTimeout>>();
  /** Links set up since opening, dialled or taken (whenAdmitted's timeout names it). */
  private linksMade = 0;
  private lastAuthProblem: string | null = null;
  /** The last problem other than a bad message: a failed admission's timeout message names it. */
  private lastProblem: string | null = null;
  private readonly limits = new AdmissionLimits();
  private readonly reports = new PerKeyRateLimit();
  /** Bytes on all data channels, departed peers included (the roster's own line). */
  private readonly wire = { sent: 0, received: 0 };
  private closed = false;
  private readonly o: PeerJsTunables;
  private readonly out: SendQueues;
  private readonly liveness: Liveness;
  private readonly controlHost: ControlHost;

  /** Registers with the PeerServer, reads its listing and dials the room's members. */
  static async open(opts: PeerJsTransportOptions): Promise<PeerJsTransport> {
    checkOptions(opts);
    const passphrase = opts.passphrase ?? '';
    const [PeerClass, key] = await Promise.all([loadPeerClass(), deriveRoomKey(opts.room, passphrase)]);
    const discovery = roomDiscoveryKey(opts.room);
    const keys = newKeyPair();
    const id = memberId(discovery, keys.publicKey);
    const peer = newPeer(PeerClass, id, opts);
    // Installed before the socket delivers anything; the transport takes over once it exists.
    const gate: { t: PeerJsTransport | null } = { t: null };
    guardSignalling(peer, {
      acceptOffer: (src) => gate.t?.acceptOffer(src) ?? false,
      dropped: (src, reason) => gate.t?.problem({ kind: 'bad-message', peer: src ?? undefined, message: `dropped a PeerServer message${src ? ` from ${src}` : ''}: ${reason}` }),
    });
    try {
      await registered(peer, opts.server, opts.connectTimeoutMs ?? 10_000);
      // Before the transport exists, so that no offer is taken without the server's TURN.
      if (opts.turnFromServer) await useServerTurn(peer, opts.server, discovery, id, opts.ice);
    } catch (e) {
      peer.destroy();
      throw e;
    }
    const t = new PeerJsTransport(peer, id, opts, key, discovery, identityOf(keys, memberIdBindsKey));
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
    /** The room's discovery key (src/peers/room/room.ts): lists the room and checks member ids. */
    private readonly discovery: string,
    /** The signing key this member's id commits to. */
    readonly identity: Identity,
  ) {
    this.tag = tagOfDiscoveryKey(discovery);
    this.room = opts.room;
    this.server = opts.server;
    this.role = opts.role ?? 'peer';
    this.o = tunables(opts);
    this.dials = new DialPolicy(this.links, discovery, this.limits);
    this.out = new SendQueues(id, this.o.channelHighWater, this.waiters, this.wire);
    this.controlHost = {
      self: id,
      key,
      role: this.role,
      send: (link, m) => this.out.control(link, m),
      reject: (link, reason) => this.reject(link, reason),
      deny: (link, reason, detail) => this.deny(link, reason, detail),
      authFailed: (link, message) => {
        this.lastAuthProblem = message;
        this.limits.failed();
        this.problem({ kind: 'auth-failed', peer: link.peer, message });
      },
      refused: (link, reason, message) => {
        if (reason === 'passphrase') this.lastAuthProblem = message;
        if (reason !== 'timeout') this.dials.refuse(link.peer);
        // A peer denies only a link it has not admitted: its handshake timer can fire after it sent
        // 'admit', which made the link admitted here, but it did not leave and it dials again.
        this.drop(link, { kind: 'denied', peer: link.peer, message }, 0, false);
      },
      maybeAdmit: (link) => this.maybeAdmit(link),
      bye: (link) => this.drop(link, null),
    };
    peer.on('connection', (conn) => this.incoming(conn));
    peer.on('error', (e) => this.peerError(e.type, e.message));
    peer.on('disconnected', () => {
      if (this.closed) return;
      // Lost the signalling server: links keep working, but nobody new can reach us until we are back.
      this.problem({ kind: 'server', message: `lost the PeerServer at ${this.server.url}; reconnecting` });
      this.later(() => {
        if (!this.closed && this.peer.disconnected && !this.peer.destroyed) this.peer.reconnect();
      }, 1000);
    });
    this.liveness = new Liveness(this.o);
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
    this.out.enqueue(link, dataFrame(bytes));
    this.stats.bytesSent += bytes.length;
    this.stats.messagesSent++;
  }

  bufferedAmount(peer: PeerId): number {
    const link = this.links.get(peer);
    return link ? bufferedOn(link) : 0;
  }

  waitForBufferedBelow(peer: PeerId, lowWater: number): Promise<void> {
    const link = this.links.get(peer);
    if (this.closed || !link || this.bufferedAmount(peer) <= lowWater) return Promise.resolve();
    link.lows.push(lowWater);
    const p = this.waiters.wait(peer, lowWater);
    this.out.armDrain(link);
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
    return linkRoster(this.id, this.role, this.wire, this.links.values());
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
        const found = this.dials.found();
        // Where each link stands, and how many were set up: tells a slow peer from links that keep being replaced.
        const now = Date.now();
        const links = [...this.links.values()].map((l) => `${l.peer}: ${l.state} for ${((now - l.createdAt) / 1000).toFixed(1)} s`);
        const detail = `${links.length ? `links ${links.join(', ')}; ` : 'no link open; '}${this.linksMade} set up since opening`;
        const givenUp = this.dials.givenUp();
        const none = givenUp > 0 ? `no member left to dial (${givenUp} listed id(s) refused or gone)` : 'no other member of the room was found on the PeerServer';
        const last = this.lastProblem !== null ? `; last problem: ${this.lastProblem}` : '';
        const why = this.lastAuthProblem ?? `${found === 0 ? none : `${found} member(s) found, none completed the handshake (${detail})`}${last}`;
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
      if (link.state === 'admitted') this.out.tryControl(link, { t: 'bye' });
      releaseLink(link);
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
    // Checked per id, not up front: each dial adds a link (so a repeated id is skipped and the cap holds).
    for (const id of await listedMembers(this.server, this.discovery, this.id)) {
      if (this.closed) return;
      if (!this.dials.shouldDial(id)) continue;
      if (!this.dials.roomForLink(true)) return;
      this.dial(id);
    }
  }

  /** The signalling guard's question: may an offer from `src` set up a connection now? */
  private acceptOffer(src: string): boolean {
    return !this.closed && this.dials.acceptOffer(src);
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
    if (this.dials.hasLeft(peer)) return refuse('it left the group earlier');
    if (conn.serialization !== 'raw' || !conn.reliable) return refuse(`it asked for ${conn.reliable ? '' : 'unreliable, '}'${conn.serialization}' serialization, not reliable 'raw'`);
    const existing = this.links.get(peer);
    if (existing) {
      // Both dialled at once: keep the connection dialled by the smaller id (the peer applies the same
      // rule); a second dial from the same side replaces its first (which may be dead).
      const keepNew = !existing.outgoing || peer < this.id;
      if (existing.state === 'admitted' || !keepNew) return this.later(() => conn.close(), 0);
      existing.closed = true;
      releaseLink(existing);
      this.links.delete(peer);
    }
    this.attach(conn, false);
  }

  private attach(conn: DataConnection, outgoing: boolean): void {
    const link = newLink(conn, outgoing);
    this.linksMade++;
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
    if (link.lowEvents) dc.addEventListener('bufferedamountlow', () => this.out.pump(link));
    // The peer's hello can arrive before this side's 'open' (wrtc), our share queued already: hello goes first.
    this.out.controlFirst(link, { t: 'hello', v: PEERJS_PROTOCOL_VERSION, nonce: toBase64(link.nonce) });
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
      const f = readFrame(bytes);
      if (f.kind === 'bad') return this.reject(link, f.reason);
      if (f.kind === 'data') {
        if (link.state !== 'admitted') return this.reject(link, 'data before admission');
        link.lastSeen = Date.now();
        this.stats.bytesReceived += f.body.length;
        this.stats.messagesReceived++;
        return this.msg.emit(link.peer, f.body);
      }
      link.lastSeen = Date.now();
      const msg = f.msg;
      link.controlChain = link.controlChain
        .then(() => (link.closed || this.closed ? undefined : handleControl(this.controlHost, link, msg)))
        .catch((e: unknown) => this.reject(link, `control handler failed: ${String(e)}`));
    } catch (e) {
      this.reject(link, `internal error: ${String(e)}`);
    }
  }

  private maybeAdmit(link: Link): void {
    if (link.closed || link.state === 'admitted' || !link.verified || !link.admittedUs) return;
    link.state = 'admitted';
    link.lastSeen = Date.now();
    this.dials.admitted(link.peer);
    this.lastAuthProblem = null;
    this.join.emit(link.peer);
    this.changed.emit();
  }

  private reject(link: Link, reason: string): void {
    link.rejected++;
    this.problem({ kind: 'bad-message', peer: link.peer, message: `rejected a message from ${link.peer}: ${reason}` });
  }

  // ---- liveness and teardown -------------------------------------------------------------------

  /**
   * Tells every admitted peer that this member may be silent for up to `ms` (it is about to block its
   * thread: Dawn in Node compiles pipelines synchronously), so they do not drop it meanwhile.
   */
  announceBusy(ms: number): void {
    const capped = Math.max(0, Math.min(MAX_BUSY_MS, Math.round(ms)));
    for (const link of this.links.values()) if (link.state === 'admitted') this.out.tryControl(link, { t: 'busy', ms: capped });
  }

  private heartbeat(): void {
    for (const a of this.liveness.tick([...this.links.values()])) {
      const { link } = a;
      if (a.act === 'ping') this.out.tryControl(link, { t: 'ping', n: link.pingSeq++, ts: performance.now() });
      else if (a.act === 'silent') this.drop(link, { kind: 'timeout', peer: link.peer, message: a.message });
      else {
        this.problem({ kind: 'timeout', peer: link.peer, message: a.message });
        if (link.state === 'authenticating') this.deny(link, 'timeout', a.message);
        else this.drop(link, null);
      }
    }
  }

  private deny(link: Link, reason: DenyReason, detail: string): void {
    this.out.tryControl(link, { t: 'deny', reason, detail: detail.slice(0, 300) });
    if (reason !== 'timeout') this.dials.refuse(link.peer);
    // Give the deny time to arrive before the channel closes.
    this.drop(link, null, DENY_GRACE_MS);
  }

  /**
   * Forgets a link; an admitted peer leaving fires onPeerLeave. `left`: the peer left the group (not
   * taken back); false where it never admitted the link on its side. Idempotent.
   */
  private drop(link: Link, problem: PeerProblem | null, closeDelayMs = 0, left = link.state === 'admitted'): void {
    if (link.closed) return;
    link.closed = true;
    const wasAdmitted = link.state === 'admitted';
    if (this.links.get(link.peer) === link) this.links.delete(link.peer);
    if (closeDelayMs > 0) this.later(() => releaseLink(link), closeDelayMs);
    else releaseLink(link);
    if (this.closed) return;
    this.dials.ended(link.peer, left);
    this.waiters.wake((w) => w.peer === link.peer);
    if (problem) this.problem(problem);
    if (wasAdmitted) this.leave.emit(link.peer);
    this.changed.emit();
  }

  private peerError(type: string, message: string): void {
    if (this.closed) return;
    const m = peerErrorMeaning(type, message);
    if (m.kind === 'gone') {
      const link = this.links.get(m.peer);
      if (!link || link.state !== 'connecting') return;
      this.dials.refuse(link.peer);
      return this.drop(link, { kind: 'connection', peer: m.peer, message: `peer ${m.peer} is not on the PeerServer any more` });
    }
    if (m.kind === 'server') this.problem({ kind: 'server', message: `PeerServer ${this.server.url}: ${message} (${type})` });
  }

  /**
   * Reports a problem. Bad messages, which a remote can send by the thousand, are rate-limited per
   * remote (a few per 10 s, the rest counted into the next one); the other kinds are bounded by the
   * offer and handshake limits already.
   */
  private problem(p: PeerProblem): void {
    if (p.kind !== 'bad-message') {
      this.lastProblem = p.message.slice(0, 300);
      return this.problems.emit(p);
    }
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
