/**
 * One transport, a succession of peer groups: the data-parallel driver forms a new PeerGroup
 * whenever the membership changes (or a collective fails), each with its own frame run id
 *     runId = runTag << 16 | epoch      (epoch 1…0xffff; epoch 0 is the run's control channel)
 * so frames still in flight for an old group can never be taken for a new one's.
 *
 * This router is the only subscriber to the transport's messages. It hands the open epoch's frames
 * to that epoch's group (through a Transport view), control frames to the driver, drops stale
 * epochs' frames quietly, and holds frames of a later epoch (a faster peer already formed the next
 * group) until that epoch opens — bounded, in count and bytes. Anything else is reported.
 * It also notes when each peer was last heard from (any frame of this run, heartbeats included):
 * that is how the driver tells a stalled peer from a slow one.
 */
import { decodeFrame, encodeFrame, FRAME_MAGIC, FrameType, HEADER_BYTES } from '../../peers/collectives/framing';
import { Listeners, type MessageHandler, type PeerId, type Transport, type Unsubscribe } from '../../peers/transport/transport';

const MAX_CONTROL_BYTES = 4096;
const MAX_EPOCHS_AHEAD = 64;

export interface ChannelLimits {
  /** Frames of later epochs held until their epoch opens (default 512, 16 MiB). */
  maxHeldFrames: number;
  maxHeldBytes: number;
}

interface Held {
  epoch: number;
  from: PeerId;
  bytes: Uint8Array;
}

export class EpochChannels {
  private epoch = 0;
  /** Whether the open epoch's group has subscribed (until then its frames are held too). */
  private delivering = false;
  private readonly groupHandlers = new Listeners<[PeerId, Uint8Array]>();
  private held: Held[] = [];
  private heldBytes = 0;
  private readonly heard = new Map<PeerId, number>();
  private readonly highestEpoch = new Map<PeerId, number>();
  private unsub: Unsubscribe;
  private readonly limits: ChannelLimits;
  private seq = 0;

  constructor(
    readonly transport: Transport,
    /** 16-bit tag of the run (high half of every frame's run id). */
    readonly runTag: number,
    private readonly onControl: (from: PeerId, payload: Uint8Array) => void,
    private readonly onReject: (from: PeerId, reason: string) => void,
    limits: Partial<ChannelLimits> = {},
    private readonly now: () => number = Date.now,
  ) {
    if (!Number.isInteger(runTag) || runTag < 0 || runTag > 0xffff) throw new Error(`EpochChannels: run tag ${runTag} is not 16-bit`);
    this.limits = { maxHeldFrames: 512, maxHeldBytes: 16 << 20, ...limits };
    this.unsub = transport.onMessage((from, bytes) => this.receive(from, bytes));
  }

  runId(epoch: number): number {
    return ((this.runTag << 16) | epoch) >>> 0;
  }

  /**
   * Opens `epoch` (closing the previous one): returns the Transport view its PeerGroup must be
   * built on. Call release() once the group subscribed, to hand it the frames held for it.
   */
  open(epoch: number): Transport {
    if (!Number.isInteger(epoch) || epoch < 1 || epoch > 0xffff) throw new Error(`EpochChannels: epoch ${epoch} outside [1, 65535]`);
    this.epoch = epoch;
    this.delivering = false;
    this.groupHandlers.clear();
    return this.view(epoch);
  }

  /** Delivers the frames held for the open epoch and forgets those of older epochs. */
  release(): void {
    this.delivering = true;
    const now = this.held.filter((h) => h.epoch === this.epoch);
    this.held = this.held.filter((h) => h.epoch > this.epoch);
    this.heldBytes = this.held.reduce((s, h) => s + h.bytes.length, 0);
    for (const h of now) this.groupHandlers.emit(h.from, h.bytes);
  }

  /** No group: frames of every epoch are held (a joiner before its welcome) or dropped as stale. */
  closeEpoch(): void {
    this.delivering = false;
    this.groupHandlers.clear();
  }

  /** Sends one control message (a single frame of the control channel). */
  sendControl(peer: PeerId, payload: Uint8Array): void {
    if (payload.length > MAX_CONTROL_BYTES) throw new Error(`control message of ${payload.length} B exceeds ${MAX_CONTROL_BYTES} B`);
    this.seq = (this.seq + 1) >>> 0;
    const h = { type: FrameType.Broadcast, runId: this.runId(0), step: 0, tag: 0, seq: this.seq, chunkIndex: 0, chunkCount: 1, totalLength: payload.length };
    this.transport.send(peer, encodeFrame(h, payload));
  }

  /** When `peer` was last heard from (ms, the clock given), or -Infinity. */
  lastHeard(peer: PeerId): number {
    return this.heard.get(peer) ?? -Infinity;
  }

  /** The highest epoch `peer` has sent frames for (0: none). */
  epochOf(peer: PeerId): number {
    return this.highestEpoch.get(peer) ?? 0;
  }

  close(): void {
    this.unsub();
    this.groupHandlers.clear();
    this.held = [];
    this.heldBytes = 0;
  }

  private view(epoch: number): Transport {
    const t = this.transport;
    const handlers = this.groupHandlers;
    const isOpen = () => this.epoch === epoch;
    return {
      id: t.id,
      get identity() {
        return t.identity;
      },
      peers: () => t.peers(),
      send: (peer, bytes) => t.send(peer, bytes),
      bufferedAmount: (peer) => t.bufferedAmount(peer),
      waitForBufferedBelow: (peer, low) => t.waitForBufferedBelow(peer, low),
      onMessage: (h: MessageHandler): Unsubscribe => (isOpen() ? handlers.add(h) : () => false),
      onPeerJoin: (h) => t.onPeerJoin(h),
      onPeerLeave: (h) => t.onPeerLeave(h),
      get stats() {
        return t.stats;
      },
      // The transport belongs to the caller: a group closing its view must not close it.
      close: () => {},
    };
  }

  private receive(from: PeerId, bytes: Uint8Array): void {
    try {
      if (!(bytes instanceof Uint8Array) || bytes.length < HEADER_BYTES) return this.onReject(from, `short frame (${bytes?.length ?? 0} B)`);
      const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      if (dv.getUint32(0, true) !== FRAME_MAGIC) return this.onReject(from, 'bad magic');
      const runId = dv.getUint32(8, true);
      if (runId >>> 16 !== this.runTag) return this.onReject(from, `frame of another run (${runId >>> 16} is not ${this.runTag})`);
      const epoch = runId & 0xffff;
      if (epoch === 0) return this.control(from, bytes);
      // A member is at most a few re-formations ahead; a frame claiming more would only push the
      // next epoch towards the end of the 16-bit space. (A joiner, before any epoch, holds any.)
      if (this.epoch > 0 && epoch > this.epoch + MAX_EPOCHS_AHEAD) return this.onReject(from, `epoch ${epoch} is too far ahead of ${this.epoch}`);
      // The full check (checksum, lengths) is the group's; a header is enough to route.
      this.heard.set(from, this.now());
      if (epoch > (this.highestEpoch.get(from) ?? 0)) this.highestEpoch.set(from, epoch);
      if (epoch === this.epoch && this.delivering) return this.groupHandlers.emit(from, bytes);
      if (epoch < this.epoch) return; // a failed group's stragglers: expected, not an attack
      this.hold({ epoch, from, bytes });
    } catch (e) {
      this.onReject(from, `internal error: ${String(e)}`);
    }
  }

  private control(from: PeerId, bytes: Uint8Array): void {
    const d = decodeFrame(bytes, HEADER_BYTES + MAX_CONTROL_BYTES);
    if (!d.ok) return this.onReject(from, `control frame: ${d.reason}`);
    const f = d.frame;
    if (f.type !== FrameType.Broadcast || f.chunkCount !== 1 || f.step !== 0 || f.tag !== 0) return this.onReject(from, 'control frame: unexpected header fields');
    this.heard.set(from, this.now());
    this.onControl(from, f.payload);
  }

  private hold(h: Held): void {
    const L = this.limits;
    if (h.bytes.length > L.maxHeldBytes) return this.onReject(h.from, `frame of epoch ${h.epoch} too large to hold`);
    this.held.push({ ...h, bytes: h.bytes.slice() });
    this.heldBytes += h.bytes.length;
    while (this.held.length > L.maxHeldFrames || this.heldBytes > L.maxHeldBytes) {
      const old = this.held.shift()!;
      this.heldBytes -= old.bytes.length;
      this.onReject(old.from, `dropped a held frame of epoch ${old.epoch} (hold limit)`);
    }
  }
}
