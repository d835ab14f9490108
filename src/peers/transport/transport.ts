/**
 * The byte-message transport the peer group runs on. Shaped after a WebRTC DataConnection (PeerJS):
 * `send` is synchronous and queues; the sender watches `bufferedAmount(peer)` and waits for it to
 * drain below a low-water mark before queueing more (RTCDataChannel.bufferedAmountLowThreshold +
 * the 'bufferedamountlow' event). Messages are delivered whole and in order per peer pair
 * (reliable, ordered channels); callers keep each message ≤ MAX_TRANSPORT_MESSAGE bytes, well under
 * the 256 KiB SCTP message limit of browsers.
 */
import type { Identity } from '../room/identity';

export type PeerId = string;

/** Largest message a Transport must accept (framing chunks stay far below it). */
export const MAX_TRANSPORT_MESSAGE = 64 * 1024;

export interface TransportStats {
  bytesSent: number;
  bytesReceived: number;
  messagesSent: number;
  messagesReceived: number;
}

export type MessageHandler = (from: PeerId, bytes: Uint8Array) => void;
export type PeerHandler = (peer: PeerId) => void;
export type Unsubscribe = () => void;

export interface Transport {
  /** This endpoint's id. */
  readonly id: PeerId;
  /** Currently connected peers (not including self). */
  peers(): PeerId[];
  /** Queues one message; throws if the peer is unknown or the transport is closed. */
  send(peer: PeerId, bytes: Uint8Array): void;
  /** Bytes queued towards `peer` and not yet handed to the network (0 for unknown peers). */
  bufferedAmount(peer: PeerId): number;
  /** Resolves once bufferedAmount(peer) ≤ lowWater, or the peer is gone, or the transport closes. */
  waitForBufferedBelow(peer: PeerId, lowWater: number): Promise<void>;
  onMessage(h: MessageHandler): Unsubscribe;
  onPeerJoin(h: PeerHandler): Unsubscribe;
  onPeerLeave(h: PeerHandler): Unsubscribe;
  /** Live counters (payload bytes of messages, not counting lower-layer overhead). */
  readonly stats: Readonly<TransportStats>;
  /** The signing key this endpoint's id commits to (the verified all-reduce needs it). */
  readonly identity?: Identity;
  close(): void;
}

export function emptyStats(): TransportStats {
  return { bytesSent: 0, bytesReceived: 0, messagesSent: 0, messagesReceived: 0 };
}

/** A set of handlers whose callbacks never throw into the caller (a bad handler must not break receive). */
export class Listeners<A extends unknown[]> {
  private hs = new Set<(...a: A) => void>();
  add(h: (...a: A) => void): Unsubscribe {
    this.hs.add(h);
    return () => this.hs.delete(h);
  }
  emit(...a: A): void {
    for (const h of [...this.hs]) {
      try {
        h(...a);
      } catch (e) {
        console.error('transport listener threw', e);
      }
    }
  }
  clear(): void {
    this.hs.clear();
  }
}

/**
 * Callers waiting for a peer's buffered amount to drop to a low-water mark (the `bufferedAmount`
 * backpressure of a data channel); transports wake the ones whose condition now holds.
 */
export class BufferWaiters {
  private waiters: { peer: PeerId; low: number; resolve: () => void }[] = [];

  wait(peer: PeerId, low: number): Promise<void> {
    return new Promise((resolve) => this.waiters.push({ peer, low, resolve }));
  }

  /** Resolves (and forgets) every waiter matching `pred`. */
  wake(pred: (w: { peer: PeerId; low: number }) => boolean): void {
    const keep: typeof this.waiters = [];
    for (const w of this.waiters) {
      if (pred(w)) w.resolve();
      else keep.push(w);
    }
    this.waiters = keep;
  }
}
