/**
 * The PeerJS transport's wire (src/peers/peerjs/peerjs.ts). Byte 0 is the kind — 0: a Transport message
 * (the rest, ≤ MAX_TRANSPORT_MESSAGE bytes), 1: a control message (UTF-8 JSON ≤ 4 KiB: hello, share,
 * proof, admit, deny, ping, pong, bye).
 *
 * Backpressure: the transport lets each data channel hold up to CHANNEL_HIGH_WATER bytes (option
 * channelHighWater) and queues the rest itself, so bufferedAmount(peer) (queue +
 * RTCDataChannel.bufferedAmount) counts every byte not yet handed to the network. Drains are
 * observed with 'bufferedamountlow' where the channel has it (browsers); Node's @roamhq/wrtc exposes
 * only bufferedAmount, so there the transport polls.
 */
import { ControlMessage, type Link } from './link';
import { type BufferWaiters, MAX_TRANSPORT_MESSAGE, type PeerId } from '../transport/transport';

const KIND_DATA = 0;
const KIND_CONTROL = 1;
const MAX_CONTROL_BYTES = 4096;
/** A send queue beyond this means the caller ignores backpressure: send() throws rather than hoard memory. */
const MAX_QUEUED_BYTES = 64 * 1024 * 1024;
/** Drain polling where the channel has no 'bufferedamountlow' (wrtc), and a safety net where it has. */
const POLL_MS_NO_EVENTS = 2;
const POLL_MS_WITH_EVENTS = 250;

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

function frame(kind: number, body: Uint8Array): Uint8Array {
  const wire = new Uint8Array(1 + body.length);
  wire[0] = kind;
  wire.set(body, 1);
  return wire;
}

/** A Transport message as it goes on the wire (the caller checked its size). */
export function dataFrame(bytes: Uint8Array): Uint8Array {
  return frame(KIND_DATA, bytes);
}

export function controlFrame(m: ControlMessage): Uint8Array {
  return frame(KIND_CONTROL, encoder.encode(JSON.stringify(m)));
}

/** One received message: Transport bytes, a control message, or why it is refused. */
export type Frame = { kind: 'data'; body: Uint8Array } | { kind: 'control'; msg: ControlMessage } | { kind: 'bad'; reason: string };

/** Checks a received message's kind, size and schema (admission is the transport's to check). */
export function readFrame(bytes: Uint8Array): Frame {
  const bad = (reason: string): Frame => ({ kind: 'bad', reason });
  if (bytes.length === 0) return bad('empty message');
  if (bytes[0] === KIND_DATA) {
    if (bytes.length - 1 > MAX_TRANSPORT_MESSAGE) return bad(`oversized message (${bytes.length - 1} B > ${MAX_TRANSPORT_MESSAGE} B)`);
    return { kind: 'data', body: bytes.subarray(1) };
  }
  if (bytes[0] !== KIND_CONTROL) return bad(`unknown message kind ${bytes[0]}`);
  if (bytes.length - 1 > MAX_CONTROL_BYTES) return bad(`oversized control message (${bytes.length - 1} B)`);
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(bytes.subarray(1)));
  } catch {
    return bad('control message is not JSON');
  }
  const m = ControlMessage.safeParse(json);
  if (!m.success) return bad(`malformed control message (${m.error.issues[0]?.message ?? 'invalid'})`);
  return { kind: 'control', msg: m.data };
}

/** Bytes to a link not yet handed to the network: the transport's queue plus the channel's buffer. */
export function bufferedOn(link: Link): number {
  return link.queuedBytes + (link.conn.dataChannel?.bufferedAmount ?? 0);
}

/** The links' send queues: each fills its data channel up to the high-water mark, then waits for a drain. */
export class SendQueues {
  constructor(
    /** This member's id (for error messages). */
    private readonly self: PeerId,
    private readonly highWater: number,
    private readonly waiters: BufferWaiters,
    /** The transport's byte counters over all links (the roster's own line). */
    private readonly wire: { sent: number },
  ) {}

  control(link: Link, m: ControlMessage): void {
    this.enqueue(link, controlFrame(m));
  }

  /** control(), ahead of anything already queued: a link's hello must be its first message. */
  controlFirst(link: Link, m: ControlMessage): void {
    this.enqueue(link, controlFrame(m), true);
  }

  /** control() where failure does not matter (closing). */
  tryControl(link: Link, m: ControlMessage): void {
    try {
      this.control(link, m);
    } catch {
      // the link is going away anyway
    }
  }

  enqueue(link: Link, wire: Uint8Array, first = false): void {
    if (link.queuedBytes + wire.length > MAX_QUEUED_BYTES) {
      throw new Error(`peerjs ${this.self}: send queue to ${link.peer} is over ${MAX_QUEUED_BYTES} B (wait for bufferedAmount to drain)`);
    }
    if (first) link.queue.unshift(wire);
    else link.queue.push(wire);
    link.queuedBytes += wire.length;
    this.pump(link);
  }

  /** Moves queued messages into the channel up to its high-water mark, then wakes drained waiters. */
  pump(link: Link): void {
    if (link.closed || link.state === 'connecting') return;
    const dc = link.conn.dataChannel;
    let sent = 0;
    while (sent < link.queue.length && dc.bufferedAmount < this.highWater) {
      const m = link.queue[sent++];
      link.queuedBytes -= m.length;
      link.bytesSent += m.length;
      this.wire.sent += m.length;
      link.conn.send(m);
      if (link.closed) return; // PeerJS closes the connection when the channel refuses a message
    }
    link.queue.splice(0, sent);
    const buffered = bufferedOn(link);
    this.waiters.wake((w) => w.peer === link.peer && buffered <= w.low);
    link.lows = link.lows.filter((l) => buffered > l);
    this.armDrain(link);
  }

  /** Arranges for pump() to run again once the channel drains, while anything waits on it. */
  armDrain(link: Link): void {
    if (link.closed || link.state === 'connecting' || (link.queue.length === 0 && link.lows.length === 0)) return;
    if (link.lowEvents) {
      link.conn.dataChannel.bufferedAmountLowThreshold = link.queue.length > 0 ? this.highWater / 2 : Math.max(...link.lows);
    }
    link.poll ??= setTimeout(
      () => {
        link.poll = null;
        this.pump(link);
      },
      link.lowEvents ? POLL_MS_WITH_EVENTS : POLL_MS_NO_EVENTS,
    );
  }
}
