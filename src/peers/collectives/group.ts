/**
 * A peer group over a full mesh: ranks, framing, and the collectives broadcast / all-gather /
 * all-to-all / barrier. Every member calls the same collectives in the same order; the k-th
 * collective of a step carries tag k, so messages of back-to-back collectives never mix (a fast
 * peer's messages for a later tag, or for the next step, wait in a bounded mailbox). A block of
 * tags reserved up front (reserveTags) lets collectives run at them in any order.
 *
 * The receive path validates every frame (structure, checksum, sender, run, step, tag window, type)
 * and reports rejects through onReject; it never throws and never changes state for a rejected frame.
 * Failures of a collective (timeout, a peer leaving, a closed group) reject its promise with a
 * CollectiveError. The group object stays sound, but ranks may now disagree on the tag counter (one
 * timed out, another completed), so after a failure the survivors close it and build a new group
 * with a new runId (e.g. derived from the run and a membership epoch): frames still in flight from
 * the failed collective then cannot match the new group's tags.
 */
import { decodeFrame, DEFAULT_CHUNK_PAYLOAD, type Frame, messageFrames, FrameType, HEADER_BYTES, Reassembler, type ReassemblyLimits } from './framing';
import { MAX_TRANSPORT_MESSAGE, type PeerId, type Transport, type Unsubscribe } from '../transport/transport';

export type CollectiveErrorCode = 'timeout' | 'peer-left' | 'invalid-payload' | 'closed' | 'send-failed';

export class CollectiveError extends Error {
  constructor(
    readonly code: CollectiveErrorCode,
    message: string,
    readonly peer?: PeerId,
  ) {
    super(message);
    this.name = 'CollectiveError';
  }
}

/** Ranks a partial collective stops waiting for (allGatherSome, sendSome); adding one re-checks the waits. */
export class Skips {
  private readonly ranks = new Set<number>();
  private readonly watchers = new Set<() => void>();
  add(r: number): void {
    if (this.ranks.has(r)) return;
    this.ranks.add(r);
    for (const w of [...this.watchers]) w();
  }
  has(r: number): boolean {
    return this.ranks.has(r);
  }
  /** @internal */
  watch(w: () => void): () => void {
    this.watchers.add(w);
    return () => this.watchers.delete(w);
  }
}

export interface PeerGroupOptions {
  /** Identifies the training run; frames of other runs are rejected. u32. */
  runId: number;
  /** All members including self (rank = index after sorting). Default: self + transport.peers(). */
  members?: PeerId[];
  /**
   * Most members (default 8). The product keeps 8: every member all-gathers every whole signed
   * contribution (verified-reduce.ts) and a browser holds one data channel per member; only
   * in-process simulations (bench/mesh-scaling.ts) form larger groups.
   */
  maxMembers?: number;
  /** Per-collective timeout in ms (default 30 000). */
  timeoutMs?: number;
  /** Payload bytes per frame (default 16 KiB − header). */
  chunkPayload?: number;
  /** Backpressure: above highWater buffered bytes the sender waits until ≤ lowWater (1 MiB / 256 KiB). */
  highWaterBytes?: number;
  lowWaterBytes?: number;
  reassembly?: Partial<ReassemblyLimits>;
  /** Completed messages waiting for their collective, per peer (default 64). */
  maxBufferedPerPeer?: number;
  /**
   * Bytes a peer may make this member hold for collectives that have not started and were not
   * reserved with a size (future tags, the next step; completed or still being reassembled;
   * default 64 MiB). Beyond it its messages are refused and it is reported through onAbuse.
   */
  maxBufferedBytesPerPeer?: number;
  /** A peer that overran a bound (bytes, messages, a reserved tag's size): named; the caller decides what follows. */
  onAbuse?: (peer: PeerId, why: string) => void;
  /** How many tags ahead of the current one a message may be (default 64). */
  maxTagsAhead?: number;
  onReject?: (peer: PeerId, reason: string) => void;
}

export interface GroupState {
  step: number;
  nextTag: number;
  buffered: number;
  inFlight: number;
  waiting: number;
}

interface Waiter {
  type: FrameType;
  from: number;
  resolve: (b: Uint8Array) => void;
}

export class PeerGroup {
  readonly members: readonly PeerId[];
  readonly rank: number;
  readonly runId: number;
  private cur = 0;
  private nextTag = 0;
  /** Tags of this step reserved by reserveTags whose collective has not started: their frames are admitted early. */
  private reserved = new Set<number>();
  /** Largest message (bytes) a reserved tag of this step takes, where its reserver said. */
  private tagLimit = new Map<number, number>();
  /** Refusals for overrun bounds, per peer (diagnostics; onAbuse names each). */
  readonly abuse = new Map<PeerId, number>();
  private seq = 0;
  private mailbox = new Map<string, { type: FrameType; payload: Uint8Array; from: number; sized?: boolean }>();
  private waiters = new Map<string, Waiter>();
  private failers = new Map<(e: CollectiveError) => void, Set<number>>();
  private reasm: Reassembler;
  private unsub: Unsubscribe[] = [];
  private buffering = new Set<(tag: number, from: number, payload: Uint8Array) => void>();
  private closed = false;
  /** Bytes of this group's own frames (collectives only: not the transport's heartbeats or other traffic). */
  readonly traffic = { sent: 0, received: 0 };
  private readonly o: Required<Omit<PeerGroupOptions, 'members' | 'reassembly' | 'onReject' | 'maxMembers' | 'onAbuse'>>;
  private readonly abuseHandler: (peer: PeerId, why: string) => void;
  private readonly rejectHandler: (peer: PeerId, reason: string) => void;

  constructor(
    readonly transport: Transport,
    opts: PeerGroupOptions,
  ) {
    const members = [...new Set(opts.members ?? [transport.id, ...transport.peers()])].sort();
    if (!members.includes(transport.id)) throw new Error(`PeerGroup: ${transport.id} is not among the members`);
    const maxMembers = opts.maxMembers ?? 8;
    if (!Number.isInteger(maxMembers) || maxMembers < 1) throw new Error(`PeerGroup: maxMembers ${maxMembers} is not a positive integer`);
    if (members.length > maxMembers) throw new Error(`PeerGroup: at most ${maxMembers} members (got ${members.length})`);
    this.members = members;
    this.rank = members.indexOf(transport.id);
    this.runId = opts.runId >>> 0;
    this.o = {
      runId: this.runId,
      timeoutMs: opts.timeoutMs ?? 30_000,
      chunkPayload: opts.chunkPayload ?? DEFAULT_CHUNK_PAYLOAD,
      highWaterBytes: opts.highWaterBytes ?? 1 << 20,
      lowWaterBytes: opts.lowWaterBytes ?? 1 << 18,
      maxBufferedPerPeer: opts.maxBufferedPerPeer ?? 64,
      maxTagsAhead: opts.maxTagsAhead ?? 64,
      maxBufferedBytesPerPeer: opts.maxBufferedBytesPerPeer ?? 64 << 20,
    };
    if (!Number.isInteger(this.o.chunkPayload) || this.o.chunkPayload < 1 || this.o.chunkPayload + HEADER_BYTES > MAX_TRANSPORT_MESSAGE) {
      throw new Error(`PeerGroup: chunkPayload ${this.o.chunkPayload} outside [1, ${MAX_TRANSPORT_MESSAGE - HEADER_BYTES}]`);
    }
    this.reasm = new Reassembler({ maxChunkPayload: this.o.chunkPayload, ...opts.reassembly });
    this.rejectHandler = opts.onReject ?? (() => {});
    this.abuseHandler = opts.onAbuse ?? (() => {});
    this.unsub.push(
      transport.onMessage((from, bytes) => this.receive(from, bytes)),
      transport.onPeerLeave((p) => this.peerLeft(p)),
    );
  }

  get size(): number {
    return this.members.length;
  }
  /** Payload bytes per frame this group sends and accepts. */
  get chunkPayload(): number {
    return this.o.chunkPayload;
  }
  get step(): number {
    return this.cur;
  }
  /** The tag the next collective of this step takes (the same on every member). */
  get tag(): number {
    return this.nextTag;
  }

  /** A message of this step already waiting for a later collective (tag), if `from` sent it. */
  buffered(tag: number, from: number): Uint8Array | undefined {
    return this.mailbox.get(this.key(this.cur, tag, from))?.payload;
  }

  /** Called for each message of this step that arrives before its collective (it waits in the mailbox). */
  onBuffered(h: (tag: number, from: number, payload: Uint8Array) => void): Unsubscribe {
    this.buffering.add(h);
    return () => this.buffering.delete(h);
  }

  /** Moves to a later step: tags restart at 0; buffered messages of older steps are dropped. */
  setStep(step: number): void {
    if (!Number.isInteger(step) || step < this.cur || step > 0xffffffff) throw new Error(`PeerGroup.setStep: ${step} < ${this.cur}`);
    if (step === this.cur) return;
    this.cur = step;
    this.nextTag = 0;
    this.reserved.clear();
    this.tagLimit.clear();
    for (const k of this.mailbox.keys()) if (Number(k.split('/')[0]) < step) this.mailbox.delete(k);
  }

  /** Bytes held for `peer`'s messages that wait for their collective (whole or being reassembled). */
  heldBytes(peer: PeerId): number {
    const from = this.members.indexOf(peer);
    let n = this.reasm.bytesInFlight(peer);
    for (const m of this.mailbox.values()) if (m.from === from) n += m.payload.length;
    return n;
  }

  state(): GroupState {
    return { step: this.cur, nextTag: this.nextTag, buffered: this.mailbox.size, inFlight: this.reasm.inFlight(), waiting: this.waiters.size };
  }

  async broadcast(root: number, payload?: Uint8Array): Promise<Uint8Array> {
    this.checkRank(root);
    if (this.rank === root) {
      if (!payload) throw new Error('broadcast: the root must pass a payload');
      const sends = new Map<number, Uint8Array>();
      for (let r = 0; r < this.size; r++) if (r !== root) sends.set(r, payload);
      await this.exchange(FrameType.Broadcast, sends, []);
      return payload;
    }
    return (await this.exchange(FrameType.Broadcast, new Map(), [root])).get(root)!;
  }

  /** Result indexed by rank (own entry is `payload` itself). */
  async allGather(payload: Uint8Array): Promise<Uint8Array[]> {
    const sends = new Map<number, Uint8Array>();
    for (let r = 0; r < this.size; r++) if (r !== this.rank) sends.set(r, payload);
    const got = await this.exchange(FrameType.AllGather, sends, this.others());
    return this.members.map((_, r) => (r === this.rank ? payload : got.get(r)!));
  }

  /** allGather that stops waiting for the ranks in `skips` (null where nothing came from one). */
  allGatherSome(payload: Uint8Array, skips: Skips, onGot?: (from: number, payload: Uint8Array) => void): Promise<(Uint8Array | null)[]> {
    return this.gatherSome(payload, skips, onGot);
  }

  /**
   * Reserves the next k tags of this step (the same on every member, as any k collectives would
   * take), for collectives run at them in any order (allGatherSomeAt): a message for one is
   * admitted until its collective starts, however far it is from the tag counter. The per-peer
   * mailbox bound still caps what a peer can make this member hold, so k may not exceed it;
   * `maxBytes(i)`: the largest message the i-th tag takes (a larger one is refused at its first
   * frame and its sender reported); without it the tags count against maxBufferedBytesPerPeer.
   */
  reserveTags(k: number, maxBytes?: (i: number) => number): number {
    if (!Number.isInteger(k) || k < 1 || k > this.o.maxBufferedPerPeer) throw new Error(`PeerGroup.reserveTags: ${k} tags, outside [1, ${this.o.maxBufferedPerPeer}] (the messages buffered per peer)`);
    const base = this.nextTag;
    for (let t = base; t < base + k; t++) {
      this.reserved.add(t);
      if (maxBytes) this.tagLimit.set(t, maxBytes(t - base));
    }
    this.nextTag += k;
    return base;
  }

  /** allGatherSome at a tag reserveTags reserved (each such tag once). */
  async allGatherSomeAt(tag: number, payload: Uint8Array, skips: Skips, onGot?: (from: number, payload: Uint8Array) => void): Promise<(Uint8Array | null)[]> {
    if (!this.reserved.delete(tag)) throw new Error(`PeerGroup.allGatherSomeAt: tag ${tag} of step ${this.cur} is not reserved (or already used)`);
    return this.gatherSome(payload, skips, onGot, tag);
  }

  private async gatherSome(payload: Uint8Array, skips: Skips, onGot?: (from: number, payload: Uint8Array) => void, tag?: number): Promise<(Uint8Array | null)[]> {
    const sends = new Map<number, Uint8Array>();
    for (let r = 0; r < this.size; r++) if (r !== this.rank) sends.set(r, payload);
    const got = await this.exchange(FrameType.AllGather, sends, this.others(), skips, onGot, tag);
    return this.members.map((_, r) => (r === this.rank ? payload : got.get(r) ?? null));
  }

  /** Point to point: `sends` go out, messages from `recvFrom` are awaited unless skipped. */
  sendSome(sends: Map<number, Uint8Array>, recvFrom: number[], skips: Skips, onGot?: (from: number, payload: Uint8Array) => void): Promise<Map<number, Uint8Array>> {
    return this.exchange(FrameType.AllToAll, sends, recvFrom, skips, onGot);
  }

  /** payloads[r] goes to rank r; result[r] is what rank r sent to this rank. */
  async allToAll(payloads: Uint8Array[]): Promise<Uint8Array[]> {
    if (payloads.length !== this.size) throw new Error(`allToAll: ${payloads.length} payloads for ${this.size} ranks`);
    const sends = new Map<number, Uint8Array>();
    for (let r = 0; r < this.size; r++) if (r !== this.rank) sends.set(r, payloads[r]);
    const got = await this.exchange(FrameType.AllToAll, sends, this.others());
    return this.members.map((_, r) => (r === this.rank ? payloads[r] : got.get(r)!));
  }

  async barrier(): Promise<void> {
    const sends = new Map<number, Uint8Array>();
    for (const r of this.others()) sends.set(r, new Uint8Array(0));
    await this.exchange(FrameType.Barrier, sends, this.others());
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const u of this.unsub) u();
    this.failAll(new CollectiveError('closed', 'peer group closed'));
    this.mailbox.clear();
  }

  private others(): number[] {
    return this.members.map((_, r) => r).filter((r) => r !== this.rank);
  }

  private checkRank(r: number): void {
    if (!Number.isInteger(r) || r < 0 || r >= this.size) throw new Error(`rank ${r} out of range [0, ${this.size})`);
  }

  private key(step: number, tag: number, from: number): string {
    return `${step}/${tag}/${from}`;
  }

  private async exchange(
    type: FrameType, sends: Map<number, Uint8Array>, recvFrom: number[], skips?: Skips, onGot?: (from: number, payload: Uint8Array) => void, reservedTag?: number,
  ): Promise<Map<number, Uint8Array>> {
    if (this.closed) throw new CollectiveError('closed', 'peer group closed');
    const step = this.cur;
    const tag = reservedTag ?? this.nextTag++;
    const got = new Map<number, Uint8Array>();
    const keys: string[] = [];
    let fail!: (e: CollectiveError) => void;
    let failed = false;
    let sent = false;
    let finishIfDone!: () => void;
    let timer: ReturnType<typeof setTimeout> | undefined;
    // Settles when every expected message arrived and every own frame was handed to the transport,
    // or on the first failure; the timeout covers both directions (a stalled link blocks sends too).
    const done = new Promise<void>((resolve, reject) => {
      fail = (e) => {
        failed = true;
        reject(e);
      };
      finishIfDone = () => {
        if (sent && recvFrom.every((f) => got.has(f) || skips?.has(f))) resolve();
      };
      for (const from of recvFrom) {
        const k = this.key(step, tag, from);
        const m = this.mailbox.get(k);
        if (m && m.type === type) {
          this.mailbox.delete(k);
          got.set(from, m.payload);
          onGot?.(from, m.payload);
          continue;
        }
        if (m) {
          this.mailbox.delete(k);
          this.onReject(this.members[from], `type ${m.type} where ${type} was expected`);
        }
        keys.push(k);
        this.waiters.set(k, {
          type,
          from,
          resolve: (b) => {
            got.set(from, b);
            onGot?.(from, b);
            finishIfDone();
          },
        });
      }
      finishIfDone();
      timer = setTimeout(() => {
        this.reasm.expire();
        fail(new CollectiveError('timeout', `${FrameType[type]} step ${step} tag ${tag}: timed out after ${this.o.timeoutMs} ms`));
      }, this.o.timeoutMs);
    });
    const unwatch = skips?.watch(() => finishIfDone());
    this.failers.set(fail, new Set([...sends.keys(), ...recvFrom]));
    // Missing peers fail fast instead of waiting for the timeout.
    for (const r of new Set([...sends.keys(), ...recvFrom])) {
      if (!this.transport.peers().includes(this.members[r])) fail(new CollectiveError('peer-left', `peer ${this.members[r]} is not connected`, this.members[r]));
    }
    Promise.all([...sends].map(([r, p]) => this.sendMessage(r, type, step, tag, p, () => failed))).then(
      () => {
        sent = true;
        finishIfDone();
      },
      (e: unknown) => fail(e instanceof CollectiveError ? e : new CollectiveError('send-failed', String(e))),
    );
    try {
      await done;
      return got;
    } finally {
      clearTimeout(timer);
      unwatch?.();
      this.failers.delete(fail);
      for (const k of keys) this.waiters.delete(k);
    }
  }

  /** Sends one message frame by frame, pausing on backpressure; stops once the collective has failed. */
  private async sendMessage(to: number, type: FrameType, step: number, tag: number, payload: Uint8Array, aborted: () => boolean): Promise<void> {
    const peer = this.members[to];
    this.seq = (this.seq + 1) >>> 0;
    for (const f of messageFrames({ type, runId: this.runId, step, tag, seq: this.seq }, payload, this.o.chunkPayload)) {
      if (this.closed) throw new CollectiveError('closed', 'peer group closed');
      if (this.transport.bufferedAmount(peer) > this.o.highWaterBytes) {
        await this.transport.waitForBufferedBelow(peer, this.o.lowWaterBytes);
      }
      if (aborted()) return;
      if (!this.transport.peers().includes(peer)) throw new CollectiveError('peer-left', `peer ${peer} left`, peer);
      this.transport.send(peer, f);
      this.traffic.sent += f.length;
    }
  }

  private receive(peer: PeerId, bytes: Uint8Array): void {
    try {
      const from = this.members.indexOf(peer);
      if (from < 0) return this.onReject(peer, 'sender is not a member');
      if (from === this.rank) return this.onReject(peer, 'frame from self');
      const d = decodeFrame(bytes, HEADER_BYTES + this.o.chunkPayload);
      if (!d.ok) return this.onReject(peer, d.reason);
      this.traffic.received += bytes.length;
      const why = this.unexpected(d.frame, from);
      if (why) return this.onReject(peer, why);
      const over = this.overBudget(d.frame, from);
      if (over) return this.abused(peer, over);
      const r = this.reasm.add(peer, d.frame);
      if (r.kind === 'reject') return this.onReject(peer, r.reason);
      if (r.kind === 'complete') this.accept(from, r.message.type, r.message.step, r.message.tag, r.message.payload);
    } catch (e) {
      this.onReject(peer, `internal error: ${String(e)}`);
    }
  }

  /** Checks run, step and tag window before a frame may take reassembly memory. */
  private unexpected(f: Frame, from: number): string | null {
    if (f.runId !== this.runId) return `run ${f.runId} is not ${this.runId}`;
    if (f.step !== this.cur && f.step !== this.cur + 1) return `step ${f.step} outside [${this.cur}, ${this.cur + 1}]`;
    const k = this.key(f.step, f.tag, from);
    const w = this.waiters.get(k);
    if (w) return w.type === f.type ? null : `type ${f.type} where ${w.type} was expected`;
    if (f.step === this.cur && this.reserved.has(f.tag)) return this.mailbox.has(k) ? 'duplicate message' : null;
    const lo = f.step === this.cur ? this.nextTag : 0;
    if (f.tag < lo || f.tag >= lo + this.o.maxTagsAhead) return `tag ${f.tag} of step ${f.step} is stale or too far ahead`;
    if (this.mailbox.has(k)) return 'duplicate message';
    return null;
  }

  private accept(from: number, type: FrameType, step: number, tag: number, payload: Uint8Array): void {
    const peer = this.members[from];
    // The step may have moved on while chunks were arriving.
    if (step !== this.cur && step !== this.cur + 1) return this.onReject(peer, `step ${step} is stale`);
    const k = this.key(step, tag, from);
    const w = this.waiters.get(k);
    if (w) {
      if (w.type !== type) return this.onReject(peer, `type ${type} where ${w.type} was expected`);
      this.waiters.delete(k);
      return w.resolve(payload);
    }
    if (this.mailbox.has(k)) return this.onReject(peer, 'duplicate message');
    let n = 0;
    for (const m of this.mailbox.values()) if (m.from === from) n++;
    if (n >= this.o.maxBufferedPerPeer) return this.abused(peer, `mailbox full (${n} messages waiting)`);
    this.mailbox.set(k, { type, payload, from, sized: step === this.cur && this.tagLimit.has(tag) });
    if (step === this.cur) for (const h of [...this.buffering]) h(tag, from, payload);
  }

  private peerLeft(peer: PeerId): void {
    const r = this.members.indexOf(peer);
    if (r < 0) return;
    this.reasm.dropPeer(peer);
    const e = new CollectiveError('peer-left', `peer ${peer} left`, peer);
    for (const [f, ranks] of [...this.failers]) if (ranks.has(r)) f(e);
  }

  /**
   * Whether taking this frame would let its sender make this member hold more than it may: a
   * message above its reserved tag's size, or (a message for no running collective and no sized
   * reservation) more than maxBufferedBytesPerPeer with what it already holds from that sender.
   * Checked when a message starts (its first frame seen), from the length its header declares.
   */
  private overBudget(f: Frame, from: number): string | null {
    const peer = this.members[from];
    const limit = f.step === this.cur ? this.tagLimit.get(f.tag) : undefined;
    if (limit !== undefined) return f.totalLength > limit ? `a ${f.totalLength} B message for tag ${f.tag}, which takes at most ${limit} B` : null;
    if (this.waiters.has(this.key(f.step, f.tag, from)) || (f.chunkCount > 1 && this.reasm.holds(peer, f.seq))) return null;
    let held = this.reasm.bytesInFlight(peer);
    for (const m of this.mailbox.values()) if (m.from === from && m.sized !== true) held += m.payload.length;
    const max = this.o.maxBufferedBytesPerPeer;
    return held + f.totalLength > max ? `${held + f.totalLength} B held for collectives not started, above ${max} B` : null;
  }

  /** A peer overran a bound: its frame is refused and it is named. */
  private abused(peer: PeerId, why: string): void {
    this.abuse.set(peer, (this.abuse.get(peer) ?? 0) + 1);
    this.onReject(peer, why);
    try {
      this.abuseHandler(peer, why);
    } catch (e) {
      console.error('PeerGroup onAbuse handler threw', e);
    }
  }

  /** Reports a rejected frame; a throwing handler must not escape into the transport. */
  private onReject(peer: PeerId, reason: string): void {
    try {
      this.rejectHandler(peer, reason);
    } catch (e) {
      console.error('PeerGroup onReject handler threw', e);
    }
  }

  private failAll(e: CollectiveError): void {
    for (const f of [...this.failers.keys()]) f(e);
  }
}
