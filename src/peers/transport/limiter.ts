/**
 * Slow-link emulation over any Transport: a token bucket on this endpoint's egress (one uplink shared
 * by all its peers, as on a home connection) plus a fixed one-way latency. Messages leave in send
 * order; a message larger than the bucket is admitted when the bucket is positive and drives it into
 * debt, so the long-run rate is exact for any message size. bufferedAmount counts bytes not yet
 * admitted by the bucket — what a DataConnection reports while its socket is the bottleneck.
 */
import {
  BufferWaiters,
  emptyStats,
  type MessageHandler,
  type PeerHandler,
  type PeerId,
  type Transport,
  type TransportStats,
  type Unsubscribe,
} from './transport';

export interface LinkLimits {
  /** Egress bandwidth in bytes per second (> 0). */
  bytesPerSecond: number;
  /** One-way latency added to every message, in ms (default 0). */
  latencyMs?: number;
  /** Bucket capacity in bytes (default: 10 ms worth of bandwidth, at least 1 byte). */
  burstBytes?: number;
  /** Clock in ms (default Date.now, which Vitest's fake timers control). */
  now?: () => number;
}

export class LimitedTransport implements Transport {
  readonly stats: TransportStats = emptyStats();
  get identity() {
    return this.inner.identity;
  }
  private queue: { peer: PeerId; bytes: Uint8Array }[] = [];
  private buffered = new Map<PeerId, number>();
  private readonly waiters = new BufferWaiters();
  private tokens: number;
  private last: number;
  private timer: ReturnType<typeof setTimeout> | null = null;
  private closed = false;
  private readonly rate: number;
  private readonly burst: number;
  private readonly latency: number;
  private readonly now: () => number;
  private unsub: Unsubscribe[] = [];

  constructor(
    private inner: Transport,
    limits: LinkLimits,
  ) {
    if (!(limits.bytesPerSecond > 0)) throw new Error('limiter: bytesPerSecond must be > 0');
    this.rate = limits.bytesPerSecond;
    this.latency = Math.max(0, limits.latencyMs ?? 0);
    this.burst = Math.max(1, limits.burstBytes ?? this.rate / 100);
    this.now = limits.now ?? Date.now;
    this.tokens = this.burst;
    this.last = this.now();
    this.unsub.push(
      inner.onMessage((from, b) => {
        this.stats.bytesReceived += b.length;
        this.stats.messagesReceived++;
      }),
      inner.onPeerLeave((p) => {
        this.buffered.delete(p);
        this.waiters.wake((w) => w.peer === p);
      }),
    );
  }

  get id(): PeerId {
    return this.inner.id;
  }
  peers(): PeerId[] {
    return this.inner.peers();
  }

  send(peer: PeerId, bytes: Uint8Array): void {
    if (this.closed) throw new Error(`limiter ${this.id}: closed`);
    if (!this.inner.peers().includes(peer)) throw new Error(`limiter ${this.id}: unknown peer ${peer}`);
    this.queue.push({ peer, bytes: bytes.slice() });
    this.buffered.set(peer, (this.buffered.get(peer) ?? 0) + bytes.length);
    this.stats.bytesSent += bytes.length;
    this.stats.messagesSent++;
    this.pump();
  }

  bufferedAmount(peer: PeerId): number {
    return (this.buffered.get(peer) ?? 0) + this.inner.bufferedAmount(peer);
  }

  waitForBufferedBelow(peer: PeerId, lowWater: number): Promise<void> {
    if (this.closed || (this.buffered.get(peer) ?? 0) <= lowWater) return this.inner.waitForBufferedBelow(peer, lowWater);
    return this.waiters.wait(peer, lowWater).then(() =>
      this.inner.waitForBufferedBelow(peer, lowWater),
    );
  }

  onMessage(h: MessageHandler): Unsubscribe {
    return this.inner.onMessage(h);
  }
  onPeerJoin(h: PeerHandler): Unsubscribe {
    return this.inner.onPeerJoin(h);
  }
  onPeerLeave(h: PeerHandler): Unsubscribe {
    return this.inner.onPeerLeave(h);
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.queue = [];
    this.waiters.wake(() => true);
    for (const u of this.unsub) u();
    this.inner.close();
  }

  private pump(): void {
    if (this.timer !== null || this.closed) return;
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) * this.rate) / 1000);
    this.last = t;
    while (this.queue.length > 0 && this.tokens > 0) {
      const m = this.queue.shift()!;
      this.tokens -= m.bytes.length;
      const left = Math.max(0, (this.buffered.get(m.peer) ?? 0) - m.bytes.length);
      this.buffered.set(m.peer, left);
      this.waiters.wake((w) => w.peer === m.peer && left <= w.low);
      const deliver = () => {
        if (!this.closed && this.inner.peers().includes(m.peer)) this.inner.send(m.peer, m.bytes);
      };
      // Equal delays keep send order (timers with equal timeouts fire in creation order).
      if (this.latency > 0) setTimeout(deliver, this.latency);
      else deliver();
    }
    if (this.queue.length > 0) {
      const waitMs = Math.max(1, Math.ceil(((1 - this.tokens) * 1000) / this.rate));
      this.timer = setTimeout(() => {
        this.timer = null;
        this.pump();
      }, waitMs);
    }
  }
}

export function limitTransport(inner: Transport, limits: LinkLimits): LimitedTransport {
  return new LimitedTransport(inner, limits);
}
