/**
 * DiLoCo (Douillard et al. 2023) over a peer group: each member runs H inner AdamW steps on its own
 * rows (rank r of world W takes rows [r·B, (r+1)·B) of step s's global batch — a function of seed,
 * step, rank and world, as in per-step data parallel), then the group averages the pseudo-gradients
 * Δ = θ_global − θ_local through the two-shot all-reduce (fp32, INT8 or INT4 on the wire) and every
 * member applies the same Nesterov outer step to θ_global (diloco-outer.ts, on the GPU) and starts
 * the next round from it. Adam moments stay with each member.
 *
 * Streaming (Douillard et al. 2025), `fragments` F > 1: the model is cut into F layer fragments;
 * after every H/F inner steps the next fragment in rotation computes its Δ and starts its exchange
 * in the background; `overlap` τ inner steps later its outer step is applied and the local weights
 * of that fragment become α·θ_local + (1 − α)·θ_global. Nothing waits on the network unless the
 * exchange took longer than τ inner steps.
 *
 * Membership and integrity come from the data-parallel members' group (dp/member-group.ts), whose
 * stepper this is: a group step is one outer step (non-streaming) or the end of a rotation (streaming), with the step report that
 * compares every member's hash of θ_global and the momentum and admits joiners; the group then
 * forms at once, so a late joiner receives the trainer state, θ_global and the momentum at an outer
 * boundary. A member lost during inner steps is noticed at the next outer step, which regroups and
 * exchanges with the survivors.
 */
import type { CheckpointFiles } from '../../engine/io/checkpoint';
import type { OuterHyper } from '../../engine/optim/outer';
import type { RunTrainer } from '../../engine/train/run-trainer';
import type { Trainer } from '../../engine/train/trainer';
import { AGOQ_BLOCK, type GradWire, WIRE_FORMATS, type WireFormat } from '../../engine/scheme/wire';
import { decodeOuterCheckpoint, encodeOuterCheckpoint, type OuterCheckpoint, outerDigest, OuterState, outerHash } from './outer';
import { sameBytes } from '../../peers/collectives/digest';
import type { DataParallelOptions, DpStepStats } from '../dp/dp';
import { MemberGroup } from '../dp/member-group';
import { MemberTrainer } from '../member-trainer';
import { rankGradients } from '../rank';
import { JsContributions } from '../../peers/collectives/js-contributions';
import { reduceContributions } from '../../peers/collectives/verified-reduce';
import { DEFAULT_HELD_OUT_BATCHES, heldOutBatch } from '../held-out';
import { DEFAULT_MAX_RISE, type HeldOutEvaluator, type HeldOutFigures, judgeHeldOut } from './held-out';
import type { Applied } from '../dp/types';
import { weightsHash } from '../dp/wire';
import { CollectiveError, type PeerGroup } from '../../peers/collectives/group';
import type { PeerId, Transport } from '../../peers/transport/transport';
import type { Exclusion } from '../../peers/collectives/screen';

export interface DilocoConfig {
  /** Inner steps per outer step (per full rotation of the fragments when streaming). */
  innerSteps: number;
  wire: WireFormat;
  /** Outer learning rate and Nesterov momentum (DiLoCo's defaults 0.7 and 0.9). */
  outerLr?: number;
  outerMomentum?: number;
  /** Streaming DiLoCo's fragments (1: plain DiLoCo). */
  fragments?: number;
  /** Inner steps between a fragment's exchange starting and its outer step being applied (streaming; default 1, 0 when H/F = 1). */
  overlap?: number;
  /** Share of the local weights kept when a fragment's θ_global is applied (streaming; default 0.5, plain DiLoCo 0). */
  alpha?: number;
  /**
   * The held-out check (held-out.ts): largest rise of the held-out loss, relative to θ_global's, that
   * one candidate's pseudo-gradient applied alone may cause before it is left out and its sender
   * accused (default DEFAULT_MAX_RISE); null: off.
   */
  heldOut?: number | null;
  /** Held-out batches (the trainer's B × T each) per evaluation (default DEFAULT_HELD_OUT_BATCHES). */
  heldOutBatches?: number;
}

export type ResolvedDiloco = Required<DilocoConfig>;

/** Fills in the defaults and checks every field; a bad one throws a message naming it. */
export function resolveDiloco(c: DilocoConfig): ResolvedDiloco {
  const fragments = c.fragments ?? 1;
  const r: ResolvedDiloco = {
    innerSteps: c.innerSteps, wire: c.wire, outerLr: c.outerLr ?? 0.7, outerMomentum: c.outerMomentum ?? 0.9,
    fragments, overlap: c.overlap ?? (fragments > 1 && c.innerSteps / fragments > 1 ? 1 : 0), alpha: c.alpha ?? (fragments > 1 ? 0.5 : 0),
    heldOut: c.heldOut === undefined ? DEFAULT_MAX_RISE : c.heldOut, heldOutBatches: c.heldOutBatches ?? DEFAULT_HELD_OUT_BATCHES,
  };
  if (!(Number.isSafeInteger(r.heldOutBatches) && r.heldOutBatches >= 1 && r.heldOutBatches <= 64)) throw new Error(`DiLoCo: held-out batches must be an integer in [1, 64], got ${r.heldOutBatches}`);
  if (r.heldOut !== null && !(r.heldOut > 0 && Number.isFinite(r.heldOut))) throw new Error(`DiLoCo: the held-out check's largest rise must be a finite number > 0 or null (off), got ${r.heldOut}`);
  if (!Number.isSafeInteger(r.innerSteps) || r.innerSteps < 1) throw new Error(`DiLoCo: inner steps H must be an integer ≥ 1, got ${r.innerSteps}`);
  if (!WIRE_FORMATS.includes(r.wire)) throw new Error(`DiLoCo: wire must be one of ${WIRE_FORMATS.join(', ')}, got ${String(r.wire)}`);
  if (!(r.outerLr > 0 && r.outerLr <= 10)) throw new Error(`DiLoCo: outer lr must be in (0, 10], got ${r.outerLr}`);
  if (!(r.outerMomentum >= 0 && r.outerMomentum < 1)) throw new Error(`DiLoCo: outer momentum must be in [0, 1), got ${r.outerMomentum}`);
  if (!Number.isSafeInteger(fragments) || fragments < 1) throw new Error(`DiLoCo: fragments must be an integer ≥ 1, got ${fragments}`);
  if (r.innerSteps % fragments !== 0) throw new Error(`DiLoCo: H = ${r.innerSteps} is not a multiple of the ${fragments} fragments`);
  const per = r.innerSteps / fragments;
  if (fragments > 1 && !(Number.isSafeInteger(r.overlap) && r.overlap >= 0 && r.overlap < per)) {
    throw new Error(`DiLoCo: overlap τ must be an integer in [0, H/F = ${per}), got ${r.overlap}`);
  }
  if (fragments === 1 && r.overlap !== 0) throw new Error('DiLoCo: overlap needs streaming (fragments > 1)');
  if (!(r.alpha >= 0 && r.alpha < 1)) throw new Error(`DiLoCo: alpha must be in [0, 1), got ${r.alpha}`);
  return r;
}

export interface DilocoStepStats extends DpStepStats {
  /** Outer steps (fragment syncs when streaming) applied so far. */
  outerSteps: number;
  /** The fragment whose outer step was applied after this inner step (null: none). */
  fragment: number | null;
  /** Time this step spent blocked on the network (exchange, reports, regrouping), ms. */
  waitMs: number;
  /** The inner step's own time (forward, backward, AdamW), ms. */
  innerMs: number;
  /** Time this step spent on the held-out check (forwards on the held-out batch), ms. */
  heldOutMs: number;
}

interface InFlight {
  fragment: number;
  /** Apply after the inner step of this index. */
  applyAfter: number;
  delta: Float32Array;
  result: Promise<Exchanged | { error: Error }>;
}

/** An outer exchange's result, with the gathered candidates (for the held-out check's re-mean). */
interface Exchanged {
  out: Float32Array;
  sent: number;
  received: number;
  fp32Bytes: number;
  kept: number[];
  excluded: Exclusion[];
  notices: { peer: PeerId; why: string }[];
  c: JsContributions;
}

const BUCKET = 1 << 22;

/** Whether the held-out rows can be drawn (a validation split of at least T + 1 tokens); alike on every member (same data). */
function heldOutDrawable(trainer: Trainer): boolean {
  try {
    heldOutBatch(trainer, 0);
    return true;
  } catch {
    return false;
  }
}

/** The senders a verified exchange faulted, as removals (the same on every member). */

export class DiLoCo extends MemberTrainer implements RunTrainer<DilocoStepStats> {
  readonly config: ResolvedDiloco;
  /** The group this member trains in (its membership, syncs and step reports). */
  readonly dp: MemberGroup;
  readonly outer: OuterState;
  private outerSteps = 0;
  private formed = false;
  /** The group step's action (set before each group step; re-run on a retry after a regroup). */
  private action: (g: PeerGroup) => Promise<Applied> = () => Promise.reject(new Error('DiLoCo: no outer action'));
  private inflight: InFlight | null = null;
  private lastInner = { loss: 0, lr: 0, gradNorm: 0 };
  /** Bytes of the streamed exchange landed at this step (counted in its stats). */
  private streamed: { sent: number; received: number; fp32: number } | null = null;
  /** Senders the streamed exchanges faulted (removed at the rotation's report, on every member alike). */
  private faulted: [PeerId, string][] = [];
  /** The held-out check's evaluator (null: the check is off); public for calibration (bench/diloco-heldout-calibration.ts). */
  readonly heldOut: HeldOutEvaluator | null;
  /** Called with every held-out evaluation's figures and the candidates it judged (calibration, tests). */
  onHeldOut: ((x: { outerStep: number; fragment: number; figures: HeldOutFigures; candidates: Map<number, Float32Array> }) => void) | null = null;
  /** Held-out check time since the last step's stats. */
  private heldOutMs = 0;

  /** `opts.mode` is not read: the group's mode follows the pseudo-gradients' wire (diloco.wire). */
  constructor(trainer: Trainer, transport: Transport, opts: Omit<DataParallelOptions, 'mode'> & { mode?: GradWire; diloco: DilocoConfig }) {
    super(trainer);
    this.config = resolveDiloco(opts.diloco);
    const c = this.config;
    const hyper: OuterHyper = { lr: c.outerLr, momentum: c.outerMomentum, alpha: c.alpha };
    this.outer = new OuterState(trainer.model, c.fragments, c.wire, hyper);
    this.heldOut = c.heldOut === null || !heldOutDrawable(trainer) ? null : this.outer.evaluator(trainer);
    // The group's mode enters its fingerprint only (the wire is there too: the outer configuration).
    this.dp = new MemberGroup(trainer, transport, { ...opts, mode: c.wire === 'int4' ? 'int8' : c.wire }, {
      fingerprint: { outer: { diloco: c } },
      step: (g) => this.action(g),
      shared: {
        hash: () => this.outer.hash(),
        digest: async () => outerDigest({ ...(await this.outer.read()), outerSteps: this.outerSteps }),
        handOver: (g, src, needy, digest) => this.handOverOuter(g, src, needy, digest),
      },
    });
  }

  get outerStepCount(): number {
    return this.outerSteps;
  }

  /** One inner step, and the outer work due after it. */
  async step(): Promise<DilocoStepStats> {
    const t0 = performance.now();
    let waitMs = 0;
    if (!this.formed) {
      const tw = performance.now();
      await this.dp.formGroup();
      waitMs += performance.now() - tw;
      this.formed = true;
    }
    const s = this.trainer.stepIndex;
    const ti = performance.now();
    await this.innerStep(s);
    const innerMs = performance.now() - ti;
    const c = this.config;
    let group: DpStepStats | null = null;
    let fragment: number | null = null;
    if (c.fragments === 1) {
      if ((s + 1) % c.innerSteps === 0) {
        fragment = 0;
        group = await this.groupStep(this.outerAction(0, null));
        waitMs += group.commMs;
      }
    } else {
      const f = this.inflight;
      if (f && s === f.applyAfter) ({ group, waitMs, fragment } = await this.land(f, waitMs));
      const per = c.innerSteps / c.fragments;
      if ((s + 1) % per === 0) {
        await this.startFragment(((s + 1) / per - 1) % c.fragments, s + c.overlap);
        // τ = 0: applied after this same step (the exchange is waited for).
        if (c.overlap === 0) ({ group, waitMs, fragment } = await this.land(this.inflight!, waitMs));
      }
    }
    return this.stats(s, t0, innerMs, waitMs, group, fragment);
  }

  /**
   * Applies a streamed fragment's outer step once its exchange is done (waiting for it only if it
   * is not); a failed exchange is redone with the next group. After the rotation's last fragment,
   * the step report.
   */
  private async land(f: InFlight, waitMs: number): Promise<{ group: DpStepStats | null; waitMs: number; fragment: number }> {
    this.inflight = null;
    const tw = performance.now();
    const r = await f.result;
    let wait = waitMs + performance.now() - tw;
    let group: DpStepStats | null = null;
    if ('error' in r) {
      if (!(r.error instanceof CollectiveError)) throw r.error;
      this.dp.invalidate(`fragment ${f.fragment}'s exchange failed: ${r.error.message}`);
      group = await this.groupStep(this.outerAction(f.fragment, f.delta));
    } else {
      const members = this.dp.currentMembers;
      const out = await this.checkHeldOut(members, f.fragment, r, `fragment ${f.fragment}`);
      this.outer.apply(f.fragment, out);
      this.outerSteps++;
      this.streamed = { sent: r.sent, received: r.received, fp32: r.fp32Bytes };
      this.faulted.push(...this.judge(members, r.excluded, `fragment ${f.fragment}`, r.notices));
      // A rotation is complete: the step report (θ_global hashes, joiners) and any regroup.
      if (f.fragment === this.config.fragments - 1) group = await this.groupStep(() => this.reportAction());
    }
    if (group) wait += group.commMs;
    return { group, waitMs: wait, fragment: f.fragment };
  }

  /** An inner AdamW step on this member's rows of step s's batch (rank.ts's slice, as per-step data parallel's). */
  private async innerStep(s: number): Promise<void> {
    const { trainer } = this;
    const members = this.dp.currentMembers;
    const rank = Math.max(0, members.indexOf(this.dp.id));
    const loss = await rankGradients(trainer, s, { rank, world: Math.max(members.length, rank + 1) });
    const { lr, gradNorm } = await trainer.applyGradients();
    this.lastInner = { loss, lr, gradNorm };
  }

  /** A group step with `action`, then the group planned by its report (joiners) forms at once. */
  private async groupStep(action: (g: PeerGroup) => Promise<Applied>): Promise<DpStepStats> {
    this.action = action;
    const st = await this.dp.step();
    const t = performance.now();
    await this.dp.formGroup();
    return { ...st, commMs: st.commMs + performance.now() - t };
  }

  /**
   * The outer step of fragment f with the current group: Δ (computed once: a retry after a regroup
   * exchanges the same Δ with the survivors), the all-reduce, the outer update; θ_global's hash.
   */
  private outerAction(f: number, given: Float32Array | null): (g: PeerGroup) => Promise<Applied> {
    let delta = given;
    let done: Applied | null = null;
    return async (g) => {
      if (done) return done; // applied already; only the report is retried
      const tc = performance.now();
      delta ??= await this.outer.delta(f);
      const te = performance.now();
      const ex = await this.exchange(g, delta);
      const out = await this.checkHeldOut(g.members, f, ex, `outer step of fragment ${f}`);
      const ta = performance.now();
      this.outer.apply(f, out);
      this.outerSteps++;
      const hash = await this.outer.hash();
      done = {
        ...this.lastInner, exchangeBytesSent: ex.sent, exchangeBytesReceived: ex.received, fp32ExchangeBytes: ex.fp32Bytes,
        computeMs: te - tc, exchangeMs: ta - te, applyMs: performance.now() - ta, weightsHash: hash, removed: this.judge(g.members, ex.excluded, `outer step of fragment ${f}`, ex.notices),
      };
      return done;
    };
  }

  /** The end of a streaming rotation: no exchange, the report with θ_global's hash. */
  private async reportAction(): Promise<Applied> {
    const t = performance.now();
    const hash = await this.outer.hash();
    return {
      ...this.lastInner, exchangeBytesSent: 0, exchangeBytesReceived: 0, fp32ExchangeBytes: 0,
      computeMs: 0, exchangeMs: 0, applyMs: performance.now() - t, weightsHash: hash, removed: this.faulted.splice(0),
    };
  }

  /**
   * The exchange's exclusions (pseudo-gradients screened as data parallel's gradients are: issue 38)
   * as events and strikes: the members to remove, alike on every member; its notices as accusations.
   */
  private judge(members: readonly PeerId[], excluded: Exclusion[], what: string, notices: readonly { peer: PeerId; why: string }[] = []): [PeerId, string][] {
    for (const e of excluded) this.dp.event('screened', [e.peer], `${what}: ${e.peer}'s pseudo-gradient left out: ${e.why}`);
    // Withheld or unverifiable parts of the exchange: named, and accused in the next report.
    for (const n of notices) this.dp.accuse(n.peer, `${what}: ${n.peer} ${n.why}`);
    return this.dp.guard.record(members, excluded).map((e): [PeerId, string] => [e.peer, e.why]);
  }

  /** The verified, screened mean of the members' Δ (verified-reduce.ts, bucket by bucket), keeping the candidates for the held-out check. */
  private async exchange(g: PeerGroup, delta: Float32Array): Promise<Exchanged> {
    const c = new JsContributions(delta, this.config.wire, AGOQ_BLOCK);
    const r = await reduceContributions(g, c, { bucketFloats: BUCKET, screen: this.dp.o.screen });
    return { out: r.out, sent: r.bytesSent, received: r.bytesReceived, fp32Bytes: r.fp32Bytes, kept: r.kept, excluded: r.excluded, notices: r.notices, c };
  }

  /**
   * The held-out check (held-out.ts) of the candidates the screen kept: each one's loss alone on
   * the outer step's held-out batch; those above the bound are left out of the mean (alike on every
   * member), named, and accused in this member's next report (a majority's accusations remove).
   * Returns the mean to apply (zeros when every candidate failed: θ_global moves by momentum only).
   */
  private async checkHeldOut(members: readonly PeerId[], f: number, ex: Exchanged, what: string): Promise<Float32Array> {
    const limit = this.config.heldOut;
    if (!this.heldOut || limit === null) return ex.out;
    const t = performance.now();
    try {
      const cand = new Map<number, Float32Array>();
      for (const r of ex.kept) cand.set(r, await ex.c.reduce([r])); // one rank's mean is its own Δ, as decoded
      const figures = await this.heldOut.evaluate(this.outerSteps, this.outer.fragments[f], cand, this.config.heldOutBatches);
      this.onHeldOut?.({ outerStep: this.outerSteps, fragment: f, figures, candidates: cand });
      const v = judgeHeldOut(members, ex.kept, figures, limit);
      if (v.excluded.length === 0) return ex.out;
      for (const e of v.excluded) {
        this.dp.event('screened', [e.peer], `${what}: ${e.peer}'s pseudo-gradient left out: ${e.why}`);
        this.dp.accuse(e.peer, `${what}: ${e.peer}'s pseudo-gradient failed the held-out check`);
      }
      return v.kept.length ? await ex.c.reduce(v.kept) : new Float32Array(ex.out.length);
    } finally {
      this.heldOutMs += performance.now() - t;
    }
  }

  /** Computes fragment f's Δ now and starts its all-reduce in the background. */
  private async startFragment(f: number, applyAfter: number): Promise<void> {
    const delta = await this.outer.delta(f);
    const g = this.dp.activeGroup;
    const result = g
      ? this.exchange(g, delta).catch((e: unknown) => ({ error: e instanceof Error ? e : new Error(String(e)) }))
      : Promise.resolve({ error: new CollectiveError('closed', 'no group') as Error });
    this.inflight = { fragment: f, applyAfter, delta, result };
  }

  /**
   * The source's θ_global, momentum and outer step count to the members that receive its trainer
   * state, with the hash of its local weights (which the trainer state is checked against);
   * validated here, applied by `apply` once the trainer state was accepted.
   */
  private async handOverOuter(g: PeerGroup, src: number, needy: number[], digest: Uint8Array): Promise<{ weightsHash: number; apply(): void } | null> {
    let mine: Uint8Array = new Uint8Array(0);
    if (g.rank === src) {
      const local = weightsHash(await this.trainer.model.readFlat('weights'));
      mine = encodeOuterCheckpoint({ ...(await this.outer.read()), outerSteps: this.outerSteps, weightsHash: local });
    }
    const got = await g.allToAll(g.members.map((_, r) => (g.rank === src && needy.includes(r) ? mine : new Uint8Array(0))));
    if (!needy.includes(g.rank)) return null;
    let s: OuterCheckpoint;
    try {
      s = decodeOuterCheckpoint(got[src], this.outer.total);
      if (s.weightsHash === undefined) throw new Error('no weights hash');
      if (!sameBytes(await outerDigest(s), digest)) throw new Error('the outer state differs from the one the majority vouched for');
    } catch (e) {
      throw new CollectiveError('invalid-payload', `outer state from ${g.members[src]}: ${(e as Error).message}`, g.members[src]);
    }
    return {
      weightsHash: s.weightsHash,
      apply: () => {
        this.outer.write(s);
        this.outerSteps = s.outerSteps;
        this.inflight = null;
      },
    };
  }

  private stats(s: number, t0: number, innerMs: number, waitMs: number, group: DpStepStats | null, fragment: number | null): DilocoStepStats {
    const stepMs = performance.now() - t0;
    const members = [...this.dp.currentMembers];
    const base: DpStepStats = group ?? {
      step: s, loss: this.lastInner.loss, groupLoss: null, lr: this.lastInner.lr, gradNorm: this.lastInner.gradNorm,
      rank: members.indexOf(this.dp.id), world: members.length, members, epoch: 0, mode: this.config.wire,
      bytesSent: 0, bytesReceived: 0, exchangeBytesSent: 0, exchangeBytesReceived: 0, fp32ExchangeBytes: 0, wireRatio: 0,
      computeMs: innerMs, applyMs: 0, exchangeMs: 0, overlapMs: 0, syncMs: 0, busyMs: innerMs, commMs: 0, stepMs, weightsHash: null, recovered: false, events: [],
    };
    const x = this.streamed;
    this.streamed = null;
    const sent = base.exchangeBytesSent + (x?.sent ?? 0);
    const fp32 = base.fp32ExchangeBytes + (x?.fp32 ?? 0);
    const ex = {
      exchangeBytesSent: sent, exchangeBytesReceived: base.exchangeBytesReceived + (x?.received ?? 0), fp32ExchangeBytes: fp32,
      wireRatio: fp32 > 0 ? sent / fp32 : 0,
    };
    return {
      ...base, ...ex, step: s, loss: this.lastInner.loss, lr: this.lastInner.lr, gradNorm: this.lastInner.gradNorm, mode: this.config.wire,
      stepMs, outerSteps: this.outerSteps, fragment, waitMs, innerMs, heldOutMs: this.takeHeldOutMs(),
    };
  }

  private takeHeldOutMs(): number {
    const ms = this.heldOutMs;
    this.heldOutMs = 0;
    return ms;
  }

  // ---- RunTrainer: the rest is the member's own trainer (MemberTrainer) ----

  /** The member's checkpoint plus the outer state (outer.safetensors: θ_global, momentum, outer steps). */
  override async checkpoint(): Promise<CheckpointFiles & { 'outer.safetensors': Uint8Array }> {
    const files = await this.trainer.checkpoint();
    return { ...files, 'outer.safetensors': encodeOuterCheckpoint({ ...(await this.outer.read()), outerSteps: this.outerSteps }) };
  }

  /** Restores the outer state of a checkpoint (the trainer's own state comes through Trainer.create). */
  restoreOuter(bytes: Uint8Array): void {
    const s = decodeOuterCheckpoint(bytes, this.outer.total);
    this.outer.write(s);
    this.outerSteps = s.outerSteps;
    this.inflight = null;
  }

  /** The hash of θ_global and the momentum (what the step reports compare). */
  async outerHash(): Promise<number> {
    const { global, momentum } = await this.outer.read();
    return outerHash(global, momentum);
  }

  stop(reason = 'stopped by the user'): void {
    this.dp.stop(reason);
  }

  destroy(): void {
    this.heldOut?.destroy();
    this.outer.destroy();
  }
}
