/**
 * Data-parallel training over any Transport (loopback in tests, PeerJS/WebRTC in the lab): every
 * peer holds the whole model, trains on its own shard of each step's batch, and the peers average
 * their gradients — in fp32, or with AGoQ's 8-bit two-shot all-reduce (allreduce.ts) — before the
 * same optimizer step everywhere. After every step (or every `hashEvery`) the peers compare a
 * crc32 of their weights; any difference stops the run on every peer with the peers and the step.
 *
 * A step: forward/backward on the peer's micro-batch(es) → the gradient as the engine stores it
 * (fp32, or AGoQ's INT8 blocks dequantized, dp-grads.ts) → all-reduce mean → written back into the
 * gradient storage → global-norm clipping + AdamW on the GPU (the same bytes in, so the same weights
 * out on every peer) → a small all-gather of step reports (loss, weights hash, peers asking to join).
 *
 * Data: step s has a global batch of world·accumulate·B rows (TextDataset.rows of the seed and s);
 * rank r's micro-batch j is rows [(r·accumulate + j)·B, +B). A function of (seed, step, rank,
 * world) only, so when the membership changes the rows re-shard by themselves, and a group of one
 * with fp32 exchange trains like Trainer.trainStep (same rows, same dispatches).
 *
 * Membership (dp-channels.ts): the peers of one run form successive PeerGroups, one per epoch. A
 * new group begins with a sync: an all-gather of each peer's (step, weights hash, established?);
 * the lowest-id established peer at the highest step is the source, and whoever differs from it
 * gets its weights, Adam moments and step (a late joiner; or a peer whose step failed after others
 * had applied it). Received state is validated whole before anything is applied. A group ends when
 *  - a member is gone (transport leave, BYE) or silent (no frame, heartbeats included, for
 *    `silenceMs`), or a collective fails: the survivors form the next epoch and retry the step with
 *    the data re-sharded. A slow but live member (heartbeating) is waited for, up to the
 *    collective timeout: a big model's step may take longer than any silence threshold;
 *  - joiners are admitted: a joiner sends HELLO; once every member lists it in a step report, the
 *    lowest-id member sends it WELCOME (epoch, members) and all form the next epoch at the next step.
 */
import type { MemReport } from '../engine/gpu/memory';
import type { CheckpointFiles } from '../engine/io/checkpoint';
import type { QuantErrorRecord } from '../engine/train/probe';
import type { RunTrainer } from '../engine/train/run-trainer';
import type { Trainer } from '../engine/train/trainer';
import { allReduceMean, allReduceWireBytes, type AllReduceMode } from './allreduce';
import { crc32 } from './crc32';
import { EpochChannels } from './dp-channels';
import { gradientAccess, type GradientAccess } from './dp-grads';
import {
  type ControlMessage, decodeControl, decodeReport, decodeState, decodeStatus, DpKind, DP_VERSION, encodeControl, encodeReport,
  encodeState, encodeStatus, fingerprintOf, type GroupStatus, MAX_EPOCH, stateBytes, type StepReport, weightsHash,
} from './dp-wire';
import { CollectiveError, PeerGroup } from './group';
import type { PeerId, Transport, Unsubscribe } from './transport';

export interface DataParallelOptions {
  /** Names the run: peers of other runs on the same transport are ignored (reported). */
  run: string;
  /** Gradient exchange: 'fp32' or 'int8' (AGoQ's two-shot INT8 all-reduce). */
  mode: AllReduceMode;
  /**
   * The peers (self included) that start together. Omitted: start alone when no peer is connected,
   * else join the run's running group (HELLO → WELCOME at its next step).
   */
  members?: PeerId[];
  /** Micro-batches per step whose gradients are averaged in fp32 before the exchange (default 1). */
  accumulate?: number;
  /** Compare weight hashes every k steps (default 1). */
  hashEvery?: number;
  /** A member not heard from (frames, heartbeats) for this long is dropped, ms (default 15 000). */
  silenceMs?: number;
  /** Longest wait of one collective on live members, ms (default 600 000). */
  collectiveTimeoutMs?: number;
  /** How long a joiner waits for its WELCOME, ms (default 120 000). */
  joinTimeoutMs?: number;
  /** Heartbeat period, ms (default silenceMs / 5). */
  heartbeatMs?: number;
  /** Attempts at one step (each failure forms a new group) before giving up (default 6). */
  maxAttempts?: number;
  /** Floats per all-reduce call (default 2^22, a multiple of 256): bounds message sizes and memory. */
  bucketFloats?: number;
  /** Bytes of state per all-to-all round when handing state over (default 16 MiB). */
  stateRoundBytes?: number;
  /** Frame payload bytes (PeerGroup's chunkPayload). */
  chunkPayload?: number;
  onEvent?: (e: DpEvent) => void;
}

export type DpErrorCode = 'diverged' | 'state-rejected' | 'config-mismatch' | 'refused' | 'no-group' | 'regroup-failed' | 'stopped';

/** A stop of the run on this peer: why, at which step, which peers. */
export class DpError extends Error {
  constructor(
    readonly code: DpErrorCode,
    message: string,
    readonly step: number,
    readonly peers: PeerId[] = [],
  ) {
    super(message);
    this.name = 'DpError';
  }
}

export type DpEventKind =
  | 'formed' | 'fault' | 'dropped' | 'admitted' | 'welcomed' | 'state-sent' | 'state-received' | 'state-rejected'
  | 'refused' | 'reject' | 'stopped';

export interface DpEvent {
  kind: DpEventKind;
  /** The trainer's step index when it happened. */
  step: number;
  epoch: number;
  peers: PeerId[];
  message: string;
}

export interface DpStepStats {
  /** Index of the step (as StepMetrics.step); the trainer is at step + 1 afterwards. */
  step: number;
  /** This peer's loss on its shard (null: the step was completed by another peer's state). */
  loss: number | null;
  /** Mean of the members' losses: the loss of the step's global batch. */
  groupLoss: number | null;
  lr: number | null;
  gradNorm: number | null;
  rank: number;
  world: number;
  members: PeerId[];
  epoch: number;
  mode: AllReduceMode;
  /** Transport bytes over the whole step (exchange, reports, heartbeats, regrouping). */
  bytesSent: number;
  bytesReceived: number;
  /** Bytes of the gradient all-reduce alone, and what fp32 would have sent for the same gradient. */
  exchangeBytesSent: number;
  exchangeBytesReceived: number;
  fp32ExchangeBytes: number;
  /** exchangeBytesSent / fp32ExchangeBytes (1 for fp32; AGoQ ≈ 0.26). */
  wireRatio: number;
  /** Forward/backward + gradient readback; writing the mean + optimizer + hash. */
  computeMs: number;
  applyMs: number;
  /** The all-reduce (with its codec work); reports and any regrouping/state hand-over. */
  exchangeMs: number;
  syncMs: number;
  /** computeMs + applyMs, and exchangeMs + syncMs. */
  busyMs: number;
  commMs: number;
  stepMs: number;
  /** crc32 of the weights after the step, on hash steps. */
  weightsHash: number | null;
  /** True when this peer did not apply the step itself but received the state after it. */
  recovered: boolean;
  events: DpEvent[];
}

interface Plan {
  epoch: number;
  members: PeerId[];
}

/** What the step reports agreed on. */
interface Reported {
  groupLoss: number;
  weightsHash: number | null;
}

/** What this peer measured while applying a step. */
interface Applied {
  loss: number;
  lr: number;
  gradNorm: number;
  exchangeBytesSent: number;
  exchangeBytesReceived: number;
  fp32ExchangeBytes: number;
  computeMs: number;
  applyMs: number;
  exchangeMs: number;
  weightsHash: number | null;
}

const EMPTY = new Uint8Array(0);

export class DataParallel implements RunTrainer<DpStepStats> {
  readonly id: PeerId;
  /** crc32 of everything that must agree for bit-identical training (model, optimizer, data, mode). */
  readonly fingerprint: number;
  /** Messages rejected so far (bad frames, bad control messages). */
  rejected = 0;
  private readonly o: Required<Omit<DataParallelOptions, 'members' | 'onEvent' | 'chunkPayload'>> & Pick<DataParallelOptions, 'chunkPayload'>;
  private readonly channels: EpochChannels;
  private readonly grads: GradientAccess;
  private group: PeerGroup | null = null;
  private plan: Plan | null = null;
  private epoch = 0;
  /** When the current group formed (Date.now): silence is counted from here at the earliest. */
  private groupSince = 0;
  /** Trainer step at which the current group formed (group steps count from it). */
  private epochBase = 0;
  private members: PeerId[] = [];
  /** When members saw different groups at a sync: the peers all of them saw (the next group's). */
  private agreedView: PeerId[] | null = null;
  /** Why the current group can no longer complete a collective (null: it can). */
  private broken: string | null = null;
  private established = false;
  private readonly pending = new Set<PeerId>();
  private readonly excluded = new Set<PeerId>();
  private welcome: { resolve: (p: Plan) => void; reject: (e: Error) => void } | null = null;
  private fatal: Error | null = null;
  private running = false;
  private events: DpEvent[] = [];
  private readonly heartbeat: ReturnType<typeof setInterval>;
  private readonly unsub: Unsubscribe[] = [];

  constructor(
    readonly trainer: Trainer,
    readonly transport: Transport,
    private readonly opts: DataParallelOptions,
  ) {
    this.id = transport.id;
    const silenceMs = opts.silenceMs ?? 15_000;
    this.o = {
      run: opts.run,
      mode: opts.mode,
      accumulate: opts.accumulate ?? 1,
      hashEvery: opts.hashEvery ?? 1,
      silenceMs,
      collectiveTimeoutMs: opts.collectiveTimeoutMs ?? 600_000,
      joinTimeoutMs: opts.joinTimeoutMs ?? 120_000,
      heartbeatMs: opts.heartbeatMs ?? Math.max(10, silenceMs / 5),
      maxAttempts: opts.maxAttempts ?? 6,
      bucketFloats: opts.bucketFloats ?? 1 << 22,
      stateRoundBytes: opts.stateRoundBytes ?? 16 << 20,
      chunkPayload: opts.chunkPayload,
    };
    const o = this.o;
    if (typeof o.run !== 'string' || o.run.length === 0) throw new Error('DataParallel: run must be a non-empty string');
    if (o.mode !== 'fp32' && o.mode !== 'int8') throw new Error(`DataParallel: mode must be 'fp32' or 'int8', got ${String(o.mode)}`);
    for (const [k, v, min] of [['accumulate', o.accumulate, 1], ['hashEvery', o.hashEvery, 1], ['maxAttempts', o.maxAttempts, 1], ['stateRoundBytes', o.stateRoundBytes, 1]] as const) {
      if (!Number.isSafeInteger(v) || v < min) throw new Error(`DataParallel: ${k} must be an integer ≥ ${min}, got ${v}`);
    }
    if (!Number.isSafeInteger(o.bucketFloats) || o.bucketFloats < 256 || o.bucketFloats % 256 !== 0) throw new Error(`DataParallel: bucketFloats must be a positive multiple of 256, got ${o.bucketFloats}`);
    for (const [k, v] of [['silenceMs', o.silenceMs], ['collectiveTimeoutMs', o.collectiveTimeoutMs], ['joinTimeoutMs', o.joinTimeoutMs], ['heartbeatMs', o.heartbeatMs]] as const) {
      if (!(v > 0)) throw new Error(`DataParallel: ${k} must be > 0, got ${v}`);
    }
    if (opts.members) {
      const m = [...new Set(opts.members)];
      if (!m.includes(this.id)) throw new Error(`DataParallel: members ${JSON.stringify(opts.members)} do not include this peer (${this.id})`);
      if (m.length > 8) throw new Error(`DataParallel: at most 8 members, got ${m.length}`);
    }
    this.grads = gradientAccess(trainer.model);
    const t = trainer.opts;
    this.fingerprint = fingerprintOf({
      protocol: DP_VERSION, run: o.run, mode: o.mode, accumulate: o.accumulate, bucketFloats: o.bucketFloats,
      model: t.model, batch: t.batch, seq: t.seq, seed: t.seed, optimizer: t.optimizer, scheme: t.scheme ?? null,
      exchange: this.grads.length, storage: this.grads.storage,
      data: crc32(new Uint8Array(trainer.data.tokens.buffer, trainer.data.tokens.byteOffset, trainer.data.tokens.byteLength)),
    });
    const runTag = crc32(new TextEncoder().encode(`dp-run:${o.run}`)) >>> 16;
    this.channels = new EpochChannels(transport, runTag, (from, p) => this.control(from, p), (from, why) => this.reject(from, why));
    this.unsub.push(transport.onPeerLeave((p) => {
      this.pending.delete(p);
      if (this.members.includes(p)) this.breakGroup(`${p} left`);
    }));
    this.heartbeat = setInterval(() => this.beat(), o.heartbeatMs);
    (this.heartbeat as { unref?: () => void }).unref?.();
  }

  /** The current group's members (empty before the first group formed). */
  get currentMembers(): readonly PeerId[] {
    return this.members;
  }

  /**
   * Trains one step with the group: joins or forms a group first if needed, retries on a new group
   * when a peer leaves or stalls. Throws DpError when the run must stop on this peer.
   */
  async step(): Promise<DpStepStats> {
    if (this.fatal) throw this.fatal;
    if (this.running) throw new Error('DataParallel.step: the previous step has not finished');
    this.running = true;
    this.events = [];
    const begin = { t0: performance.now(), sent: this.transport.stats.bytesSent, received: this.transport.stats.bytesReceived };
    let s = this.trainer.stepIndex;
    const wasMember = this.established;
    let applied: Applied | null = null;
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          if (!this.group) await this.regroup();
          if (this.trainer.stepIndex !== s) {
            // A member's step was completed while regrouping (it had applied it before the failure,
            // or received the state after it); a joiner takes part in the group's current step.
            if (wasMember) return this.stepStats(s, begin, applied, null);
            s = this.trainer.stepIndex;
          }
          const r = await this.trainOnce(s, (a) => (applied = a));
          return this.stepStats(s, begin, applied, r);
        } catch (e) {
          if (this.fatal) throw this.fatal;
          if (!(e instanceof CollectiveError)) throw e;
          if (attempt >= this.o.maxAttempts) {
            throw new DpError('regroup-failed', `step ${s}: gave up after ${attempt} attempts; last failure: ${e.message}`, s, this.members);
          }
          this.fault(e);
        }
      }
    } catch (e) {
      this.stopWith(e instanceof Error ? e : new Error(String(e)));
      throw this.fatal;
    } finally {
      this.running = false;
    }
  }

  private stepStats(s: number, begin: { t0: number; sent: number; received: number }, a: Applied | null, report: Reported | null): DpStepStats {
    const stepMs = performance.now() - begin.t0;
    const busy = a ? a.computeMs + a.applyMs : 0;
    return {
      step: s,
      loss: a?.loss ?? null,
      groupLoss: report?.groupLoss ?? null,
      lr: a?.lr ?? null,
      gradNorm: a?.gradNorm ?? null,
      rank: this.members.indexOf(this.id),
      world: this.members.length,
      members: [...this.members],
      epoch: this.epoch,
      mode: this.o.mode,
      bytesSent: this.transport.stats.bytesSent - begin.sent,
      bytesReceived: this.transport.stats.bytesReceived - begin.received,
      exchangeBytesSent: a?.exchangeBytesSent ?? 0,
      exchangeBytesReceived: a?.exchangeBytesReceived ?? 0,
      fp32ExchangeBytes: a?.fp32ExchangeBytes ?? 0,
      wireRatio: a && a.fp32ExchangeBytes > 0 ? a.exchangeBytesSent / a.fp32ExchangeBytes : 0,
      computeMs: a?.computeMs ?? 0,
      applyMs: a?.applyMs ?? 0,
      exchangeMs: a?.exchangeMs ?? 0,
      syncMs: stepMs - busy - (a?.exchangeMs ?? 0),
      busyMs: busy,
      commMs: stepMs - busy,
      stepMs,
      weightsHash: report?.weightsHash ?? a?.weightsHash ?? null,
      recovered: a === null || report === null,
      events: this.events,
    };
  }

  // ---- RunTrainer: the group's step; the rest is the member's own trainer (every member holds the same state) ----

  /** The trainer's step index (a joiner's jumps to the group's when it receives the state). */
  get stepIndex(): number {
    return this.trainer.stepIndex;
  }

  /** A group step waits on the exchange, so nothing is submitted ahead and nothing is ever in flight. */
  async settle(): Promise<null> {
    return null;
  }

  /** This member's validation loss, which is the group's (not a collective). */
  evaluate(): Promise<number> {
    return this.trainer.evaluate();
  }

  quantErrors(): Promise<QuantErrorRecord[]> {
    return this.trainer.quantErrors();
  }

  sample(prompt: string, maxNew: number, temperature: number, seed: number): Promise<string> {
    return this.trainer.sample(prompt, maxNew, temperature, seed);
  }

  /** Saves the run (any member's checkpoint is the group's). */
  checkpoint(): Promise<CheckpointFiles> {
    return this.trainer.checkpoint();
  }

  memory(): MemReport {
    return this.trainer.memory();
  }

  /** Leaves the group (members drop this peer at once) and stops; the transport stays open. */
  stop(reason = 'stopped by the user'): void {
    this.stopWith(new DpError('stopped', reason, this.trainer.stepIndex, [this.id]));
  }

  // ---- one step in a formed group ----

  private async trainOnce(s: number, onApplied: (a: Applied) => void): Promise<Reported> {
    if (this.broken) throw new CollectiveError('closed', this.broken);
    const g = this.group!;
    g.setStep(s - this.epochBase + 1); // group step 0 is the sync
    const { trainer } = this;
    const k = this.o.accumulate;
    const B = trainer.opts.batch;
    const T = trainer.opts.seq;
    const tc = performance.now();
    let acc: Float32Array | null = null;
    let lossSum = 0;
    for (let j = 0; j < k; j++) {
      const r0 = (g.rank * k + j) * B;
      lossSum += await trainer.computeGradients(trainer.data.rows(s, T, 'train', r0, r0 + B));
      const grad = await this.grads.read();
      if (!acc) acc = grad;
      else for (let i = 0; i < acc.length; i++) acc[i] += grad[i];
    }
    if (k > 1) for (let i = 0; i < acc!.length; i++) acc![i] /= k;
    const loss = lossSum / k;
    const te = performance.now();
    const ex = await this.exchange(g, acc!);
    const ta = performance.now();
    this.grads.write(ex.out);
    const { lr, gradNorm } = await trainer.applyGradients();
    const hashed = (s + 1) % this.o.hashEvery === 0;
    const hash = hashed ? weightsHash(await trainer.model.readFlat('weights')) : null;
    const tr = performance.now();
    onApplied({
      loss, lr, gradNorm, exchangeBytesSent: ex.sent, exchangeBytesReceived: ex.received, fp32ExchangeBytes: ex.fp32Bytes,
      computeMs: te - tc, exchangeMs: ta - te, applyMs: tr - ta, weightsHash: hash,
    });

    const joiners = [...this.pending].filter((p) => !g.members.includes(p) && this.transport.peers().includes(p));
    const raw = await g.allGather(encodeReport({ step: s + 1, weightsHash: hash, loss, joiners }));
    const reports = raw.map((b, r) => this.decoded(g, r, () => decodeReport(b)));
    reports.forEach((rep, r) => {
      if (rep.step !== s + 1) throw new CollectiveError('invalid-payload', `${g.members[r]} reports step ${rep.step}, expected ${s + 1}`, g.members[r]);
    });
    if (hashed) this.checkHashes(g, reports, s);
    this.admit(g, reports);
    return { groupLoss: reports.reduce((a, r) => a + r.loss, 0) / reports.length, weightsHash: hash };
  }

  /** Mean of `x` over the group, bucket by bucket; bytes as sent, and as fp32 would have sent them. */
  private async exchange(g: PeerGroup, x: Float32Array): Promise<{ out: Float32Array; sent: number; received: number; fp32Bytes: number }> {
    const out = new Float32Array(x.length);
    let sent = 0;
    let received = 0;
    let fp32Bytes = 0;
    for (let a = 0; a < x.length; a += this.o.bucketFloats) {
      const b = Math.min(x.length, a + this.o.bucketFloats);
      const r = await allReduceMean(g, x.subarray(a, b), { mode: this.o.mode });
      out.set(r.out, a);
      sent += r.bytesSent;
      received += r.bytesReceived;
      fp32Bytes += allReduceWireBytes(b - a, g.size, g.rank, 'fp32', { chunkPayload: g.chunkPayload });
    }
    return { out, sent, received, fp32Bytes };
  }

  /** Every member got the same reports, so every member reaches the same verdict. */
  private checkHashes(g: PeerGroup, reports: StepReport[], s: number): void {
    const byHash = new Map<number, PeerId[]>();
    reports.forEach((r, i) => {
      const h = r.weightsHash ?? -1;
      byHash.set(h, [...(byHash.get(h) ?? []), g.members[i]]);
    });
    if (byHash.size === 1) return;
    // The largest set (ties: the one holding the lowest id) is the reference; the others diverged.
    const sets = [...byHash.entries()].sort((a, b) => b[1].length - a[1].length || (a[1][0] < b[1][0] ? -1 : 1));
    const odd = sets.slice(1).flatMap(([, p]) => p);
    const show = sets.map(([h, p]) => `${h < 0 ? 'no hash' : `crc32 0x${h.toString(16).padStart(8, '0')}`} on ${p.join(', ')}`).join('; ');
    throw new DpError('diverged', `weights differ after step ${s} (${s + 1} steps taken): ${show}. Diverged: ${odd.join(', ')}. The run stops on every peer.`, s, odd);
  }

  /** Joiners every member can reach enter at the next step; the lowest-id member welcomes them. */
  private admit(g: PeerGroup, reports: StepReport[]): void {
    const everyone = reports[0].joiners.filter((p) => reports.every((r) => r.joiners.includes(p)) && !g.members.includes(p));
    const members = [...g.members, ...everyone].sort();
    if (everyone.length === 0 || members.length > 8) return;
    const epoch = this.nextEpoch(g.members);
    if (g.members[0] === this.id) {
      const msg = encodeControl({ kind: DpKind.Welcome, fingerprint: this.fingerprint, epoch, members });
      for (const p of everyone) this.sendControl(p, msg);
      this.event('welcomed', everyone, `welcomed into epoch ${epoch}`);
    }
    for (const p of everyone) {
      this.pending.delete(p);
      this.excluded.delete(p); // a peer that left or restarted earlier is back with a fresh hello
    }
    this.event('admitted', everyone, `${everyone.join(', ')} join at step ${this.trainer.stepIndex}`);
    this.endGroup();
    this.plan = { epoch, members };
  }

  // ---- forming groups ----

  private async regroup(): Promise<void> {
    if (!this.plan) {
      if (this.established) throw new Error('DataParallel: no group and no plan (internal)');
      if (this.opts.members) this.plan = { epoch: 1, members: [...new Set(this.opts.members)].sort() };
      else if (this.transport.peers().length === 0) this.plan = { epoch: 1, members: [this.id] };
      else this.plan = await this.join();
    }
    const { epoch, members } = this.plan;
    this.endGroup();
    const view = this.channels.open(epoch);
    const g = new PeerGroup(view, {
      runId: this.channels.runId(epoch), members, timeoutMs: this.o.collectiveTimeoutMs, chunkPayload: this.o.chunkPayload,
      onReject: (p, why) => this.reject(p, why),
    });
    this.channels.release();
    this.group = g;
    this.groupSince = Date.now();
    this.epoch = epoch;
    this.members = [...g.members];
    this.plan = null;
    await this.sync(g);
    this.established = true;
    this.epochBase = this.trainer.stepIndex;
    this.event('formed', this.members, `epoch ${epoch}: ${this.members.join(', ')}`);
  }

  /** The new group's first collective: agree on the state, hand it to whoever differs. */
  private async sync(g: PeerGroup): Promise<void> {
    const { trainer } = this;
    const mine: GroupStatus = {
      fingerprint: this.fingerprint, epoch: this.epoch, members: [...g.members], step: trainer.stepIndex,
      weightsHash: weightsHash(await trainer.model.readFlat('weights')), established: this.established,
    };
    const raw = await g.allGather(encodeStatus(mine));
    const st = raw.map((b, r) => this.decoded(g, r, () => decodeStatus(b)));
    const alien = g.members.filter((_, r) => st[r].fingerprint !== this.fingerprint);
    if (alien.length) {
      throw new DpError('config-mismatch', `${alien.join(', ')} train${alien.length === 1 ? 's' : ''} with another configuration (model, optimizer, data, seed, batch or mode): a group needs the same run on every peer`, trainer.stepIndex, alien);
    }
    const same = (x: GroupStatus) => x.epoch === this.epoch && x.members.length === g.size && x.members.every((p, i) => p === g.members[i]);
    const other = st.findIndex((x) => !same(x));
    if (other >= 0) {
      // Views differ (a leave not yet seen everywhere, an admission half done): all retry with the
      // peers that every view holds, which every member computes alike from these statuses.
      this.agreedView = g.members.filter((p) => st.every((x) => x.members.includes(p)));
      throw new CollectiveError('invalid-payload', `${g.members[other]} sees another group (epoch ${st[other].epoch}: ${st[other].members.join(', ')})`);
    }
    const ranks = g.members.map((_, r) => r);
    const est = ranks.filter((r) => st[r].established);
    const cand = est.length ? est : ranks;
    const top = Math.max(...cand.map((r) => st[r].step));
    const src = cand.find((r) => st[r].step === top)!;
    const diverged = est.filter((r) => st[r].step === top && st[r].weightsHash !== st[src].weightsHash);
    if (diverged.length) {
      const odd = diverged.map((r) => g.members[r]);
      throw new DpError('diverged', `weights differ at step ${top} between ${g.members[src]} and ${odd.join(', ')} (found when forming epoch ${this.epoch}). The run stops on every peer.`, top, odd);
    }
    const needy = ranks.filter((r) => st[r].step !== top || st[r].weightsHash !== st[src].weightsHash);
    if (needy.length) await this.handOver(g, src, needy, st[src]);
  }

  /** The source's state to the needy ranks, in rounds of stateRoundBytes; validated before use. */
  private async handOver(g: PeerGroup, src: number, needy: number[], announced: GroupStatus): Promise<void> {
    const { trainer } = this;
    const n = trainer.model.layout.totalFloats;
    const total = stateBytes(n);
    const R = this.o.stateRoundBytes;
    const rounds = Math.ceil(total / R);
    const payload = g.rank === src ? encodeState(await trainer.trainingState()) : null;
    const iNeed = needy.includes(g.rank);
    const got = iNeed ? new Uint8Array(total) : null;
    for (let i = 0; i < rounds; i++) {
      const piece = payload ? payload.subarray(i * R, Math.min(total, (i + 1) * R)) : EMPTY;
      const recv = await g.allToAll(g.members.map((_, r) => (needy.includes(r) ? piece : EMPTY)));
      if (got) {
        const want = Math.min(total, (i + 1) * R) - i * R;
        if (recv[src].length !== want) {
          this.rejectState(g, src, `round ${i} carried ${recv[src].length} B, expected ${want}`);
        }
        got.set(recv[src], i * R);
      }
    }
    if (g.rank === src) this.event('state-sent', needy.map((r) => g.members[r]), `state of step ${announced.step} (${total} B)`);
    if (!got) return;
    let state;
    try {
      state = decodeState(got, { n, step: announced.step, weightsHash: announced.weightsHash });
    } catch (e) {
      this.rejectState(g, src, (e as Error).message);
    }
    trainer.restoreTrainingState(state);
    this.event('state-received', [g.members[src]], `state of step ${state.step} from ${g.members[src]}`);
  }

  private rejectState(g: PeerGroup, src: number, why: string): never {
    const from = g.members[src];
    this.event('state-rejected', [from], why);
    throw new DpError('state-rejected', `state from ${from} rejected, nothing applied: ${why}`, this.trainer.stepIndex, [from]);
  }

  private join(): Promise<Plan> {
    const hello = encodeControl({ kind: DpKind.Hello, fingerprint: this.fingerprint });
    const greet = (p: PeerId) => this.sendControl(p, hello);
    for (const p of this.transport.peers()) greet(p);
    const unsub = this.transport.onPeerJoin(greet);
    return new Promise<Plan>((resolve, reject) => {
      const timer = setTimeout(() => reject(new DpError('no-group', `no group of run '${this.o.run}' admitted this peer within ${this.o.joinTimeoutMs} ms`, this.trainer.stepIndex)), this.o.joinTimeoutMs);
      const done = () => {
        clearTimeout(timer);
        unsub();
        this.welcome = null;
      };
      this.welcome = {
        resolve: (p) => (done(), resolve(p)),
        reject: (e) => (done(), reject(e)),
      };
    });
  }

  // ---- faults ----

  /** A collective failed: close the group and plan the next one without the peers that are gone. */
  private fault(e: CollectiveError): void {
    const old = this.agreedView ?? this.members;
    this.agreedView = null;
    const silent = this.silentMembers();
    const why = this.broken ?? e.message;
    this.endGroup();
    if (!this.established && !this.opts.members) {
      // A welcomed joiner whose first group failed asks again rather than guess the membership.
      this.event('fault', old, `joining failed: ${why}; asking again`);
      this.plan = null;
      return;
    }
    const connected = new Set(this.transport.peers());
    const gone = old.filter((p) => p !== this.id && (
      !connected.has(p) || this.excluded.has(p) || silent.includes(p) || (e.code === 'invalid-payload' && e.peer === p)));
    const members = old.filter((p) => !gone.includes(p));
    this.event('fault', old, `step ${this.trainer.stepIndex} failed: ${why}`);
    if (gone.length) this.event('dropped', gone, `dropped ${gone.join(', ')}`);
    this.plan = { epoch: this.nextEpoch(members), members };
  }

  /** Past the current epoch and any epoch a member has already moved to (so failed peers meet again). */
  private nextEpoch(members: readonly PeerId[]): number {
    const e = Math.max(this.epoch + 1, ...members.filter((p) => p !== this.id).map((p) => this.channels.epochOf(p)));
    if (e > MAX_EPOCH) throw new DpError('regroup-failed', `run '${this.o.run}' used up its ${MAX_EPOCH} group epochs`, this.trainer.stepIndex);
    return e;
  }

  /**
   * The group lost a member: a collective in flight fails now (instead of at its timeout), and the
   * next step regroups before computing anything.
   */
  private breakGroup(reason: string): void {
    if (!this.group) return;
    this.broken ??= reason;
    this.group.close();
  }

  private endGroup(): void {
    this.broken = null;
    this.group?.close();
    this.group = null;
    this.channels.closeEpoch();
  }

  // ---- control channel ----

  private control(from: PeerId, payload: Uint8Array): void {
    let m: ControlMessage;
    try {
      m = decodeControl(payload);
    } catch (e) {
      return this.reject(from, `control message: ${(e as Error).message}`);
    }
    switch (m.kind) {
      case DpKind.Hello:
        if (m.fingerprint !== this.fingerprint) {
          this.sendControl(from, encodeControl({ kind: DpKind.Refuse, reason: `run '${this.o.run}' trains with another configuration (model, optimizer, data, seed, batch or mode)` }));
          this.event('refused', [from], `${from} asked to join with another configuration`);
          return;
        }
        if (this.members.includes(from) && from !== this.id) {
          // A member that says hello again has restarted: its state is gone, it joins afresh.
          this.excluded.add(from);
          this.breakGroup(`${from} restarted`);
        }
        this.pending.add(from);
        return;
      case DpKind.Welcome:
        if (!this.welcome) return this.reject(from, 'unexpected welcome');
        if (m.fingerprint !== this.fingerprint || !m.members.includes(this.id) || !m.members.includes(from)) {
          return this.reject(from, 'welcome for another configuration or membership');
        }
        this.excluded.clear();
        return this.welcome.resolve({ epoch: m.epoch, members: [...m.members].sort() });
      case DpKind.Refuse:
        if (!this.welcome) return this.reject(from, 'unexpected refusal');
        this.event('refused', [from], m.reason);
        return this.welcome.reject(new DpError('refused', `${from} refused this peer: ${m.reason}`, this.trainer.stepIndex, [from]));
      case DpKind.Bye:
        this.pending.delete(from);
        if (this.members.includes(from)) {
          this.excluded.add(from);
          this.breakGroup(`${from} left the group: ${m.reason}`);
        }
        return;
      case DpKind.Heartbeat:
        return; // the channels noted the time
    }
  }

  /** Heartbeats to the members, and the watchdog: a silent member fails the group now. */
  private beat(): void {
    if (!this.group) return;
    const msg = encodeControl({ kind: DpKind.Heartbeat });
    for (const p of this.members) if (p !== this.id) this.sendControl(p, msg);
    const silent = this.silentMembers();
    if (silent.length) this.breakGroup(`${silent.join(', ')} silent for ${this.o.silenceMs} ms`);
  }

  private silentMembers(): PeerId[] {
    const cut = Date.now() - this.o.silenceMs;
    return this.members.filter((p) => p !== this.id && Math.max(this.channels.lastHeard(p), this.groupSince) < cut);
  }

  private sendControl(peer: PeerId, msg: Uint8Array): void {
    if (!this.transport.peers().includes(peer)) return;
    try {
      this.channels.sendControl(peer, msg);
    } catch (e) {
      this.reject(peer, `could not send: ${(e as Error).message}`);
    }
  }

  // ---- helpers ----

  /** Decodes a member's payload; a malformed one fails the collective naming the sender. */
  private decoded<T>(g: PeerGroup, r: number, f: () => T): T {
    try {
      return f();
    } catch (e) {
      throw new CollectiveError('invalid-payload', `${g.members[r]}: ${(e as Error).message}`, g.members[r]);
    }
  }

  private reject(peer: PeerId, reason: string): void {
    this.rejected++;
    this.event('reject', [peer], reason);
  }

  private event(kind: DpEventKind, peers: PeerId[], message: string): void {
    const e: DpEvent = { kind, step: this.trainer.stepIndex, epoch: this.epoch, peers, message };
    this.events.push(e);
    if (this.events.length > 1000) this.events.splice(0, this.events.length - 1000);
    try {
      this.opts.onEvent?.(e);
    } catch (err) {
      console.error('DataParallel onEvent handler threw', err);
    }
  }

  /** Stops this peer: says BYE to the members, closes the group and the channels; later steps throw `e`. */
  private stopWith(e: Error): void {
    if (this.fatal) return;
    this.fatal = e;
    const bye = encodeControl({ kind: DpKind.Bye, reason: e.message });
    for (const p of this.members) if (p !== this.id) this.sendControl(p, bye);
    this.event('stopped', [this.id], e.message);
    this.endGroup();
    this.welcome?.reject(e);
    clearInterval(this.heartbeat);
    this.channels.close();
    for (const u of this.unsub) u();
  }
}
