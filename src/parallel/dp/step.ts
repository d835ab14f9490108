/**
 * The data-parallel step's core (dp.ts): the bucketed gradient all-reduce, the weights-hash verdict
 * over the step reports, and the step's stats. Free functions of what they are given, so the driver
 * keeps only the group's life cycle.
 */
import type { GradExchange } from '../exchange/grad-exchange';
import type { Trainer } from '../../engine/train/trainer';
import type { AllReduceMode } from '../../peers/collectives/allreduce';
import type { GradientAccess } from './grads';
import type { Exclusion, MemberGuard } from '../../peers/collectives/screen';
import type { StepReport } from './wire';
import { type Applied, DpError, type DpEvent, type DpStepStats, type Reported, type ResolvedOptions, type StepBegin } from './types';
import { GpuContributions } from '../exchange/gpu-contributions';
import { rankGradients } from '../rank';
import { CollectiveError, type PeerGroup } from '../../peers/collectives/group';
import type { PeerId, Transport } from '../../peers/transport/transport';
import { bucketSpans, reduceContributions, reduceVerified, type VerifiedOptions, type VerifiedResult } from '../../peers/collectives/verified-reduce';

/** Where a step's gradient is exchanged from: the GPU exchange over the model's storage, else the host's (read, JS codec, write). */
export interface GradientPath {
  grads: GradientAccess;
  gpu: GradExchange | null;
}

export interface StepGradient {
  /** This member's mean loss over its micro-batches. */
  loss: number;
  computeMs: number;
  /** The exchange after backward ended (what it did not overlap). */
  exchangeMs: number;
  /** From the first bucket's send to the end of backward (0 when nothing was sent before it ended). */
  overlapMs: number;
  /** Writing the host's mean back (0 on the GPU path: the mean is already there). */
  writeMs: number;
  sent: number;
  received: number;
  fp32Bytes: number;
  excluded: Exclusion[];
  notices: VerifiedResult['notices'];
}

/**
 * Step s's gradient on this member: forward/backward on its micro-batches (rank.ts's slice), then
 * the group's verified, screened mean (verified-reduce.ts, bucket by bucket) written where the
 * optimizer reads the gradient.
 */
export async function stepGradient(g: PeerGroup, trainer: Trainer, s: number, o: ResolvedOptions, path: GradientPath): Promise<StepGradient> {
  const k = o.accumulate;
  if (path.gpu && k !== 1) throw new Error('stepGradient: the GPU exchange takes one micro-batch per step');
  if (path.gpu && o.overlap && path.gpu.streamable) return streamedStep(g, trainer, path.gpu, o, s);
  const tc = performance.now();
  let acc: Float32Array | null = null;
  let lossSum = 0;
  for (let j = 0; j < k; j++) {
    lossSum += await rankGradients(trainer, s, { rank: g.rank, world: g.size, micro: j, accumulate: k });
    if (path.gpu) continue;
    const grad = await path.grads.read();
    if (!acc) acc = grad;
    else for (let i = 0; i < acc.length; i++) acc[i] += grad[i];
  }
  if (acc && k > 1) for (let i = 0; i < acc.length; i++) acc[i] /= k;
  const te = performance.now();
  const vo = { bucketFloats: o.bucketFloats, screen: o.screen };
  const r = path.gpu ? await reduceContributions(g, new GpuContributions(path.gpu), vo) : await reduceVerified(g, acc!, { ...vo, mode: o.mode });
  const ta = performance.now();
  if (r.out) path.grads.write(r.out);
  return {
    loss: lossSum / k, computeMs: te - tc, exchangeMs: ta - te, overlapMs: 0, writeMs: performance.now() - ta,
    sent: r.bytesSent, received: r.bytesReceived, fp32Bytes: r.fp32Bytes, excluded: r.excluded, notices: r.notices,
  };
}

/**
 * The GPU path with the exchange behind backward: backward runs in segments (one command buffer
 * each); right after the segment that completes a bucket is submitted, the bucket is encoded on
 * its own readback (GradExchange.encodeRange), and the verified all-reduce sends it as soon as its
 * bytes are back — while the GPU runs the rest of backward. Same bytes, same mean as the whole encode.
 */
async function streamedStep(g: PeerGroup, trainer: Trainer, ex: GradExchange, o: ResolvedOptions, s: number): Promise<StepGradient> {
  const tc = performance.now();
  const spans = bucketSpans(ex.n, o.bucketFloats);
  const plan = ex.streamPlan(spans);
  const slots = spans.map(() => {
    let settle!: { resolve: (p: Promise<Uint8Array>) => void; reject: (e: unknown) => void };
    const promise = new Promise<Uint8Array>((resolve, reject) => (settle = { resolve, reject }));
    return { promise, ...settle };
  });
  let firstSend = Infinity;
  const vo: VerifiedOptions = { bucketFloats: o.bucketFloats, screen: o.screen, onBucketSent: () => (firstSend = Math.min(firstSend, performance.now())) };
  const lossP = rankGradients(trainer, s, { rank: g.rank, world: g.size }, {
    cuts: plan.cuts,
    onSegment: (i) => plan.bySegment[i].forEach((b) => slots[b].resolve(ex.encodeRange(spans[b][0], spans[b][1], b))),
  });
  // A backward that fails before every bucket is encoded fails the exchange too (a slot resolved already is unaffected).
  lossP.catch((e: unknown) => slots.forEach((sl) => sl.reject(e)));
  // The signed header (the commitment) waits for a finite loss: a diverged member contributes nothing.
  const rP = reduceContributions(g, new GpuContributions(ex, slots.map((sl) => sl.promise)), { ...vo, commitAfter: lossP });
  rP.catch(() => {}); // awaited below, after the loss
  const loss = await lossP;
  const te = performance.now();
  const r = await rP;
  const ta = performance.now();
  return {
    loss, computeMs: te - tc, exchangeMs: ta - te, overlapMs: Math.max(0, te - firstSend), writeMs: 0,
    sent: r.bytesSent, received: r.bytesReceived, fp32Bytes: r.fp32Bytes, excluded: r.excluded, notices: r.notices,
  };
}

/** Step s of per-step data parallel: stepGradient, what the screen and the echo saw (events, removals), then the optimizer step and the weights hash. */
export async function applyGroupGradient(
  g: PeerGroup, trainer: Trainer, s: number, o: ResolvedOptions, path: GradientPath, guard: MemberGuard,
  event: (kind: 'screened' | 'suspect', peer: PeerId, message: string) => void,
): Promise<Applied> {
  const ex = await stepGradient(g, trainer, s, o, path);
  for (const e of ex.excluded) event('screened', e.peer, `step ${s}: ${e.peer}'s contribution left out: ${e.why}`);
  for (const n of ex.notices) event('suspect', n.peer, `step ${s}: ${n.peer} ${n.why}`);
  const removed = guard.record(g.members, ex.excluded).map((e): [PeerId, string] => [e.peer, e.why]);
  const ta = performance.now();
  const { lr, gradNorm } = await trainer.applyGradients();
  const hash = (s + 1) % o.hashEvery === 0 ? await trainer.model.hashFlat('weights') : null;
  const tr = performance.now();
  return {
    loss: ex.loss, lr, gradNorm, exchangeBytesSent: ex.sent, exchangeBytesReceived: ex.received, fp32ExchangeBytes: ex.fp32Bytes,
    computeMs: ex.computeMs, exchangeMs: ex.exchangeMs, overlapMs: ex.overlapMs, applyMs: ex.writeMs + tr - ta, weightsHash: hash,
    removed,
  };
}

/**
 * Divergence judged by majority, never by role: when a strict majority of the members report one
 * weights hash, the members outside it are returned (to be removed); when this member is outside
 * it, or no strict majority exists, the run stops on this member with its weights as they are.
 */
export function checkHashes(g: PeerGroup, reports: StepReport[], s: number): PeerId[] {
  const byHash = new Map<number, PeerId[]>();
  reports.forEach((r, i) => {
    const h = r.weightsHash ?? -1;
    byHash.set(h, [...(byHash.get(h) ?? []), g.members[i]]);
  });
  if (byHash.size === 1) return [];
  const sets = [...byHash.entries()].sort((a, b) => b[1].length - a[1].length || (a[1][0] < b[1][0] ? -1 : 1));
  const majority = sets[0][1].length * 2 > g.size;
  const odd = sets.slice(majority ? 1 : 0).flatMap(([, p]) => p).filter((p) => !majority || !sets[0][1].includes(p));
  if (majority && sets[0][1].includes(g.members[g.rank])) return odd;
  const show = sets.map(([h, p]) => `${h < 0 ? 'no hash' : `crc32 0x${h.toString(16).padStart(8, '0')}`} on ${p.join(', ')}`).join('; ');
  const why = majority ? `The majority holds another state: this peer stops, its weights as they are. Diverged: ${odd.join(', ')}.` : 'No majority of the members agrees on one state: the run stops on this peer, its weights as they are.';
  throw new DpError('diverged', `weights differ after step ${s} (${s + 1} steps taken): ${show}. ${why}`, s, odd);
}

/** Decodes a member's payload; a malformed one fails the collective naming the sender. */
export function decodeMember<T>(g: PeerGroup, r: number, f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw new CollectiveError('invalid-payload', `${g.members[r]}: ${(e as Error).message}`, g.members[r]);
  }
}

/** Where the peer stands when a step ends: what its stats are measured against. */
export interface StepContext {
  id: PeerId;
  members: readonly PeerId[];
  epoch: number;
  mode: AllReduceMode;
  transport: Transport;
  events: DpEvent[];
}

export function stepStats(c: StepContext, s: number, begin: StepBegin, a: Applied | null, report: Reported | null): DpStepStats {
  const stepMs = performance.now() - begin.t0;
  const busy = a ? a.computeMs + a.applyMs : 0;
  return {
    step: s,
    loss: a?.loss ?? null,
    groupLoss: report?.groupLoss ?? null,
    lr: a?.lr ?? null,
    gradNorm: a?.gradNorm ?? null,
    rank: c.members.indexOf(c.id),
    world: c.members.length,
    members: [...c.members],
    epoch: c.epoch,
    mode: c.mode,
    bytesSent: c.transport.stats.bytesSent - begin.sent,
    bytesReceived: c.transport.stats.bytesReceived - begin.received,
    exchangeBytesSent: a?.exchangeBytesSent ?? 0,
    exchangeBytesReceived: a?.exchangeBytesReceived ?? 0,
    fp32ExchangeBytes: a?.fp32ExchangeBytes ?? 0,
    wireRatio: a && a.fp32ExchangeBytes > 0 ? a.exchangeBytesSent / a.fp32ExchangeBytes : 0,
    computeMs: a?.computeMs ?? 0,
    applyMs: a?.applyMs ?? 0,
    exchangeMs: a?.exchangeMs ?? 0,
    overlapMs: a?.overlapMs ?? 0,
    syncMs: stepMs - busy - (a?.exchangeMs ?? 0),
    busyMs: busy,
    commMs: stepMs - busy,
    stepMs,
    weightsHash: report?.weightsHash ?? a?.weightsHash ?? null,
    recovered: a === null || report === null,
    events: c.events,
  };
}
