/**
 * In-memory transport for tests: a hub of N endpoints, fully connected. Delivery is asynchronous
 * (a microtask flush, so a send never re-enters the receiver synchronously) and FIFO per pair unless
 * `reorder` is set, which shuffles each flush batch (to exercise out-of-order reassembly).
 * Sent bytes are copied, so a sender reusing its buffer cannot alter a message in flight.
 */
import { Rng } from '../../engine/util/rng';
import { sameBytes } from '../collectives/digest';
import { type Identity, identityOf, newKeyPair } from '../room/identity';
import {
  BufferWaiters,
  emptyStats,
  Listeners,
  type MessageHandler,
  type PeerHandler,
  type PeerId,
  type Transport,
  type TransportStats,
  type Unsubscribe,
} from './transport';

export interface LoopbackOptions {
  /** Shuffle deliveries within each flush (seeded). Default off: ordered, like a reliable channel. */
  reorder?: { seed: number };
}

interface Pending {
  from: LoopbackTransport;
  to: PeerId;
  bytes: Uint8Array;
}

export class LoopbackHub {
  private endpoints = new Map<PeerId, LoopbackTransport>();
  private queue: Pending[] = [];
  private scheduled = false;
  private rng: Rng | null;
  /** The hub is the tests' key directory: an id binds the key its endpoint was made with. */
  private keys = new Map<PeerId, Uint8Array>();

  constructor(opts: LoopbackOptions = {}) {
    this.rng = opts.reorder ? new Rng(opts.reorder.seed) : null;
  }

  /** Adds an endpoint; existing endpoints see a join event for it (and it sees none for them). */
  endpoint(id: PeerId): LoopbackTransport {
    if (this.endpoints.has(id)) throw new Error(`loopback: duplicate peer id ${id}`);
    const keys = newKeyPair();
    this.keys.set(id, keys.publicKey);
    const ep = new LoopbackTransport(this, id, identityOf(keys, (peer, pk) => sameBytes(this.keys.get(peer) ?? new Uint8Array(0), pk)));
    const others = [...this.endpoints.values()];
    this.endpoints.set(id, ep);
    for (const o of others) o.joined(id);
    return ep;
  }

  /** Creates endpoints "p0".."p{n-1}". */
  static group(n: number, opts: LoopbackOptions = {}): { hub: LoopbackHub; transports: LoopbackTransport[] } {
    const hub = new LoopbackHub(opts);
    const transports = Array.from({ length: n }, (_, i) => hub.endpoint(`p${i}`));
    return { hub, transports };
  }

  ids(): PeerId[] {
    return [...this.endpoints.keys()];
  }

  /** Delivers raw bytes as if `from` had sent them (for fuzzing: forged frames from a member's id). */
  inject(from: PeerId, to: PeerId, bytes: Uint8Array): void {
    const src = this.endpoints.get(from);
    if (!src) throw new Error(`loopback: unknown sender ${from}`);
    this.enqueue({ from: src, to, bytes: bytes.slice() });
  }

  /** @internal */
  enqueue(p: Pending): void {
    this.queue.push(p);
    if (!this.scheduled) {
      this.scheduled = true;
      queueMicrotask(() => this.flush());
    }
  }

  /** @internal */
  remove(id: PeerId): void {
    if (!this.endpoints.delete(id)) return;
    for (const o of this.endpoints.values()) o.left(id);
  }

  /** @internal */
  has(id: PeerId): boolean {
    return this.endpoints.has(id);
  }

  private flush(): void {
    this.scheduled = false;
    const batch = this.queue;
    this.queue = [];
    if (this.rng) {
      for (let i = batch.length - 1; i > 0; i--) {
        const j = this.rng.int(i + 1);
        [batch[i], batch[j]] = [batch[j], batch[i]];
      }
    }
    for (const p of batch) {
      p.from.drained(p.to, p.bytes.length);
      const dst = this.endpoints.get(p.to);
      if (dst && this.endpoints.has(p.from.id)) dst.deliver(p.from.id, p.bytes);
    }
  }
}

export class LoopbackTransport implements Transport {
  readonly stats: TransportStats = emptyStats();
  private closed = false;
  private known = new Set<PeerId>();
  private buffered = new Map<PeerId, number>();
  private readonly waiters = new BufferWaiters();
  private msg = new Listeners<[PeerId, Uint8Array]>();
  private join = new Listeners<[PeerId]>();
  private leave = new Listeners<[PeerId]>();

  constructor(
    private hub: LoopbackHub,
    readonly id: PeerId,
    readonly identity: Identity,
  ) {
    for (const p of hub.ids()) if (p !== id) this.known.add(p);
  }

  peers(): PeerId[] {
    return [...this.known];
  }

  send(peer: PeerId, bytes: Uint8Array): void {
    if (this.closed) throw new Error(`loopback ${this.id}: closed`);
    if (!this.known.has(peer)) throw new Error(`loopback ${this.id}: unknown peer ${peer}`);
    this.buffered.set(peer, (this.buffered.get(peer) ?? 0) + bytes.length);
    this.stats.bytesSent += bytes.length;
    this.stats.messagesSent++;
    this.hub.enqueue({ from: this, to: peer, bytes: bytes.slice() });
  }

  bufferedAmount(peer: PeerId): number {
    return this.buffered.get(peer) ?? 0;
  }

  waitForBufferedBelow(peer: PeerId, lowWater: number): Promise<void> {
    if (this.closed || !this.known.has(peer) || this.bufferedAmount(peer) <= lowWater) return Promise.resolve();
    return this.waiters.wait(peer, lowWater);
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

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.known.clear();
    this.waiters.wake(() => true);
    this.hub.remove(this.id);
    this.msg.clear();
    this.join.clear();
    this.leave.clear();
  }

  /** @internal */
  deliver(from: PeerId, bytes: Uint8Array): void {
    if (this.closed) return;
    this.stats.bytesReceived += bytes.length;
    this.stats.messagesReceived++;
    this.msg.emit(from, bytes);
  }
  /** @internal */
  drained(peer: PeerId, n: number): void {
    const b = Math.max(0, (this.buffered.get(peer) ?? 0) - n);
    this.buffered.set(peer, b);
    this.waiters.wake((w) => w.peer === peer && b <= w.low);
  }
  /** @internal */
  joined(peer: PeerId): void {
    if (this.closed) return;
    this.known.add(peer);
    this.join.emit(peer);
  }
  /** @internal */
  left(peer: PeerId): void {
    if (this.closed || !this.known.delete(peer)) return;
    this.buffered.delete(peer);
    this.waiters.wake((w) => w.peer === peer);
    this.leave.emit(peer);
  }
}
