/**
 * The runs behind bench/group-fidelity.ts, on one device in one process, all evaluated on the same
 * fixed validation batches (one evaluator trainer of batch B, whose weights are replaced by the
 * weights under test):
 *  1. a lone member with batch B for S steps: the target loss L* (its validation loss at step S) and
 *     its step time alone on the device;
 *  2. per N, a lone member with batch N·B for S steps (same tokens as the group): the fidelity baseline;
 *  3. per N, an N-member DiLoCo group on the loopback hub (each member B rows of the same global
 *     batch as run 2's, dataset.ts), θ_global evaluated after every outer step (every H inner steps).
 * The projection puts the per-member step time measured alone beside the exchange time the group
 * was exposed to; docs/peer-groups.md ("Projected speed-up and fidelity: method") says why.
 */
import { median } from '../src/engine/gpu/timer';
import type { Runtime } from '../src/engine/gpu/runtime';
import type { BatchSource } from '../src/engine/train/data/data';
import { inMemoryData } from '../src/engine/train/data/data';
import type { TrainOptions } from '../src/engine/train/options';
import type { Tokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { type FlatTrainingState, Trainer } from '../src/engine/train/trainer';
import { DiLoCo, type DilocoConfig, type DilocoStepStats } from '../src/parallel/diloco/diloco';
import { type LinkLimits, limitTransport } from '../src/peers/transport/limiter';
import { LoopbackHub } from '../src/peers/transport/loopback';
import type { Transport } from '../src/peers/transport/transport';

export interface FidelityOptions {
  rt: Runtime;
  tokenizer: Tokenizer;
  data: BatchSource;
  /** The lone member's options: batch B, seq, S = optimizer.total_steps, evalBatches. */
  options: TrainOptions;
  /** Group sizes N (each ≥ 2). */
  members: number[];
  diloco: DilocoConfig;
  /** Validation every E steps of the lone runs (and at step S). */
  evalEvery: number;
  /** Steps of the lone DiLoCo inner step timed alone (computeGradients + applyGradients). */
  timeSteps: number;
  /** Every member's uplink through the limiter (null: the loopback hub as it is). */
  link: LinkLimits | null;
  log?: (line: string) => void;
}

export interface CurvePoint {
  step: number;
  tokens: number;
  valLoss: number;
}

export interface LoneRun {
  batch: number;
  tokens: number;
  curve: CurvePoint[];
  finalValLoss: number;
  /** The curve's lowest point (on a small corpus validation can turn up before step S). */
  best: CurvePoint;
  /** Median wall time of one training step alone on the device (loss read back). */
  stepMs: number;
}

export interface GroupPoint extends CurvePoint {
  outerStep: number;
  /**
   * Min over members of the round's time outside inner steps: Δ computed and quantized, the exchange,
   * the outer update, the step report, waiting for the slowest member (the member that arrived last
   * waited least for the others' compute on the shared device).
   */
  exposedMs: number;
  /** Mean over members of the same. */
  meanExposedMs: number;
  /** Min over members of the part of it blocked on the network (DilocoStepStats.waitMs). */
  waitMs: number;
  /** Wall time of the round (all members' inner steps on the one device, and the exchange). */
  wallMs: number;
  /** Pseudo-gradient bytes one member sent in the round. */
  exchangeBytes: number;
}

export interface GroupRun {
  members: number;
  tokens: number;
  outerSteps: number;
  curve: GroupPoint[];
  finalValLoss: number;
  best: GroupPoint;
  /** Median over rounds of exposedMs: the projection's exchange time per outer step. */
  exposedMsPerRound: number;
  /** Median over inner steps of the members' mean inner-step time while sharing the device (not used in the projection). */
  sharedInnerMs: number;
  /** First outer step (1-based) whose θ_global validation loss is ≤ L*, and its inner step count; null: not reached. */
  reachOuterStep: number | null;
  reachStep: number | null;
}

export interface Projection {
  /** Inner steps to L* × per-member step time alone + outer steps to L* × exposed exchange per round (null: not reached). */
  groupMs: number | null;
  /** S × the lone step time (the lone member reaches L* at step S by definition). */
  loneMs: number;
  speedup: number | null;
  /** The lone member's first evaluated step at or below L* (< S when its curve dips below its final value earlier), and the speed-up against that. */
  loneFirstReachStep: number;
  speedupVsFirstReach: number | null;
  target: number;
  meets: boolean;
}

export interface FidelityRow {
  members: number;
  bigBatch: LoneRun;
  group: GroupRun;
  /** Group's final validation loss / the N·B lone run's (target ≤ 1.02). */
  fidelityRatio: number;
  fidelityWithin2pct: boolean;
  projection: Projection;
}

export interface FidelityResult {
  lone: LoneRun;
  targetLoss: number;
  /** Median of a member's inner step (its rows, computeGradients + applyGradients) alone on the device. */
  memberStepMs: number;
  rows: FidelityRow[];
}

export async function runFidelity(o: FidelityOptions): Promise<FidelityResult> {
  const S = o.options.optimizer.total_steps;
  const H = o.diloco.innerSteps;
  if (S % H !== 0) throw new Error(`steps S = ${S} must be a multiple of H = ${H}`);
  if (!(o.members.length > 0 && o.members.every((n) => Number.isInteger(n) && n >= 2 && n <= 8))) throw new Error(`members must be in [2, 8], got ${o.members.join(',')}`);
  if (!(Number.isInteger(o.evalEvery) && o.evalEvery >= 1)) throw new Error(`evalEvery must be an integer ≥ 1, got ${o.evalEvery}`);
  if (!(Number.isInteger(o.timeSteps) && o.timeSteps >= 1)) throw new Error(`timeSteps must be an integer ≥ 1, got ${o.timeSteps}`);
  const log = o.log ?? (() => {});
  const make = (batch: number) => Trainer.create(o.rt, { ...o.options, batch }, '', { tokenizer: o.tokenizer, data: o.data });
  const B = o.options.batch;
  const evaluator = await make(B);
  const trainers: Trainer[] = [evaluator];
  try {
    const valOf = async (weights: Float32Array) => {
      evaluator.model.uploadParams(weights);
      return evaluator.evaluate();
    };
    const lone = await loneRun(evaluator, o.evalEvery, null, log);
    const targetLoss = lone.finalValLoss;
    log(`lone B=${B}: val ${targetLoss.toFixed(4)} at step ${S}, ${lone.stepMs.toFixed(2)} ms/step`);
    const maxN = Math.max(...o.members);
    const members: Trainer[] = [];
    for (let i = 0; i < maxN; i++) members.push(await make(B));
    trainers.push(...members);
    const initial = await members[0].trainingState();
    const memberStepMs = await innerStepAlone(members[0], o.timeSteps, initial);
    log(`member inner step alone: ${memberStepMs.toFixed(2)} ms`);
    const rows: FidelityRow[] = [];
    for (const n of o.members) {
      const big = await make(n * B);
      let bigBatch: LoneRun;
      try {
        bigBatch = await loneRun(big, o.evalEvery, valOf, log);
      } finally {
        big.destroy();
      }
      log(`lone B=${n * B}: val ${bigBatch.finalValLoss.toFixed(4)} at step ${S}, ${bigBatch.stepMs.toFixed(2)} ms/step`);
      for (const t of members.slice(0, n)) t.restoreTrainingState(initial);
      const group = await groupRun(members.slice(0, n), o, targetLoss, valOf, log);
      const fidelityRatio = group.finalValLoss / bigBatch.finalValLoss;
      log(`group of ${n}: val ${group.finalValLoss.toFixed(4)} (${fidelityRatio.toFixed(4)}× the B=${n * B} run), L* reached at outer step ${group.reachOuterStep ?? '-'}, exposed ${group.exposedMsPerRound.toFixed(1)} ms/round`);
      rows.push({
        members: n, bigBatch, group, fidelityRatio, fidelityWithin2pct: fidelityRatio <= 1.02,
        projection: project(n, S, H, lone, targetLoss, memberStepMs, group),
      });
    }
    return { lone, targetLoss, memberStepMs, rows };
  } finally {
    for (const t of trainers) t.destroy();
  }
}

/**
 * S steps of a lone trainer, validation every `evalEvery` steps and at S (through `val`, or its own
 * evaluate when it is the evaluator). A step is submitted ahead of the last one's read-back, except
 * after a step an evaluation follows (evaluate would count the step submitted ahead).
 */
async function loneRun(t: Trainer, evalEvery: number, val: ((w: Float32Array) => Promise<number>) | null, log: (l: string) => void): Promise<LoneRun> {
  const S = t.opts.optimizer.total_steps;
  const tokensPerStep = t.opts.batch * t.opts.seq;
  const curve: CurvePoint[] = [];
  const stepMs: number[] = [];
  for (let s = 0; s < S; s++) {
    const due = (s + 1) % evalEvery === 0 || s + 1 === S;
    const m = await t.trainStep({ next: !due });
    stepMs.push((tokensPerStep / m.tokens_per_s) * 1000);
    if (t.stepIndex !== s + 1) throw new Error(`lone run: step ${t.stepIndex} after ${s + 1} steps`);
    if (!due) continue;
    const valLoss = val ? await val(await t.model.readFlat('weights')) : await t.evaluate();
    curve.push({ step: s + 1, tokens: (s + 1) * tokensPerStep, valLoss });
    log(`  lone B=${t.opts.batch} step ${s + 1}: val ${valLoss.toFixed(4)}`);
  }
  return { batch: t.opts.batch, tokens: S * tokensPerStep, curve, finalValLoss: curve[curve.length - 1].valLoss, best: lowest(curve), stepMs: median(stepMs) };
}

/** A DiLoCo member's inner step (rank 0's rows, forward/backward then AdamW) timed with nothing else running; the state is restored after. */
async function innerStepAlone(t: Trainer, steps: number, initial: FlatTrainingState): Promise<number> {
  const data = inMemoryData(t.data);
  const times: number[] = [];
  for (let i = 0; i <= steps; i++) {
    const t0 = performance.now();
    await t.computeGradients(data.rows(t.stepIndex, t.opts.seq, 'train', 0, t.opts.batch));
    await t.applyGradients();
    if (i > 0) times.push(performance.now() - t0); // the first one warms up
  }
  t.restoreTrainingState(initial);
  return median(times);
}

async function groupRun(trainers: Trainer[], o: FidelityOptions, targetLoss: number, val: (w: Float32Array) => Promise<number>, log: (l: string) => void): Promise<GroupRun> {
  const n = trainers.length;
  const S = o.options.optimizer.total_steps;
  const { transports } = LoopbackHub.group(n);
  const links: Transport[] = o.link ? transports.map((t) => limitTransport(t, o.link!)) : transports;
  const ids = links.map((t) => t.id);
  const drivers = trainers.map((t, i) => new DiLoCo(t, links[i], { run: `fidelity-${n}`, mode: 'fp32', members: ids, silenceMs: 300_000, diloco: o.diloco }));
  const H = drivers[0].config.innerSteps;
  const tokensPerStep = n * o.options.batch * o.options.seq;
  try {
    const curve: GroupPoint[] = [];
    const inner: number[] = [];
    for (let r = 0; r < S / H; r++) {
      const t0 = performance.now();
      const per: DilocoStepStats[][] = [];
      for (let i = 0; i < H; i++) {
        const st = await Promise.all(drivers.map((d) => d.step()));
        per.push(st);
        inner.push(st.reduce((a, s) => a + s.innerMs, 0) / n);
      }
      const wallMs = performance.now() - t0;
      const sumOf = (f: (s: DilocoStepStats) => number) => drivers.map((_, m) => per.reduce((a, st) => a + f(st[m]), 0));
      const exposed = sumOf((s) => s.stepMs - s.innerMs);
      const { global } = await drivers[0].outer.read();
      const valLoss = await val(global);
      const step = (r + 1) * H;
      curve.push({
        outerStep: r + 1, step, tokens: step * tokensPerStep, valLoss,
        exposedMs: Math.min(...exposed), meanExposedMs: exposed.reduce((a, b) => a + b, 0) / n, waitMs: Math.min(...sumOf((s) => s.waitMs)), wallMs,
        exchangeBytes: per.reduce((a, st) => a + st[0].exchangeBytesSent, 0),
      });
      log(`  group of ${n} outer step ${r + 1} (step ${step}): val ${valLoss.toFixed(4)}, exposed ${Math.min(...exposed).toFixed(1)} ms`);
    }
    const reach = curve.find((p) => p.valLoss <= targetLoss) ?? null;
    return {
      members: n, tokens: S * tokensPerStep, outerSteps: drivers[0].outerStepCount, curve,
      finalValLoss: curve[curve.length - 1].valLoss, best: lowest(curve), exposedMsPerRound: median(curve.map((p) => p.exposedMs)),
      sharedInnerMs: median(inner), reachOuterStep: reach?.outerStep ?? null, reachStep: reach?.step ?? null,
    };
  } finally {
    for (const d of drivers) {
      d.stop('benchmark done');
      d.destroy();
    }
    for (const t of links) t.close();
  }
}

const lowest = <P extends CurvePoint>(curve: P[]): P => curve.reduce((a, p) => (p.valLoss < a.valLoss ? p : a));

function project(n: number, S: number, H: number, lone: LoneRun, targetLoss: number, memberStepMs: number, g: GroupRun): Projection {
  const groupMs = g.reachOuterStep === null ? null : g.reachOuterStep * H * memberStepMs + g.reachOuterStep * g.exposedMsPerRound;
  const loneMs = S * lone.stepMs;
  const loneFirstReachStep = lone.curve.find((p) => p.valLoss <= targetLoss)!.step;
  const speedup = groupMs === null ? null : loneMs / groupMs;
  return {
    groupMs, loneMs, speedup, loneFirstReachStep,
    speedupVsFirstReach: groupMs === null ? null : (loneFirstReachStep * lone.stepMs) / groupMs,
    target: 0.8 * n, meets: speedup !== null && speedup >= 0.8 * n,
  };
}
