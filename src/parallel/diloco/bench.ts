/**
 * DiLoCo over emulated slow links: N in-process members (one Runtime: their GPU work takes turns on
 * one device) on a loopback hub, each endpoint behind a LimitedTransport, running whole outer steps.
 * Reports the pseudo-gradient bytes per trained token against per-step fp32 data parallel's (the
 * all-reduce's exact byte formula for the same model and group), and the share of the members'
 * inner-step time they spent blocked on the network. Also a lone member's step on the same device
 * (Trainer.trainStep), the reference a group is compared with.
 */
import { median } from '../../engine/gpu/timer';
import type { Runtime } from '../../engine/gpu/runtime';
import type { TrainOptions } from '../../engine/train/options';
import { CharTokenizer } from '../../engine/train/tokenizer/tokenizer';
import { type FlatTrainingState, Trainer } from '../../engine/train/trainer';
import { allReduceWireBytes } from '../../peers/collectives/allreduce';
import { DiLoCo, type DilocoConfig, type DilocoStepStats } from './diloco';
import { type LinkLimits, limitTransport } from '../../peers/transport/limiter';
import { LoopbackHub } from '../../peers/transport/loopback';

export interface DilocoBenchOptions {
  rt: Runtime;
  text: string;
  /** Every member's options (batch = the member's batch). */
  options: TrainOptions;
  members: number;
  diloco: DilocoConfig;
  /** Timed outer steps (rotations when streaming), after `warmup` untimed ones. */
  rounds: number;
  warmup: number;
  link: LinkLimits;
  /** Steps of the lone-member reference (0: skip it). */
  loneSteps?: number;
}

export interface DilocoBenchResult {
  members: number;
  params: number;
  tokensPerMemberStep: number;
  /** Pseudo-gradient bytes one member sends per outer step / rotation (the all-reduce's, measured). */
  exchangeBytesPerRound: number;
  /** Per trained token of one member: DiLoCo's, and per-step fp32 data parallel's for the same group. */
  bytesPerToken: number;
  fp32DpBytesPerToken: number;
  /** fp32DpBytesPerToken / bytesPerToken. */
  reduction: number;
  /** Members' mean, summed over the timed inner steps: blocked on the network, and their inner steps' time. */
  waitMs: number;
  innerMs: number;
  /** waitMs / innerMs: the share of compute time spent waiting on the network. */
  waitShare: number;
  /** Members' mean per outer step: the held-out check's forwards (0 with the check off). */
  heldOutMsPerRound: number;
  /** Median wall time of a group inner step (all members done), and of a lone member's trainStep. */
  msPerGroupStep: number;
  loneMsPerStep: number | null;
  lossFirst: number;
  lossLast: number;
}

const meanOf = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

export async function benchDiloco(o: DilocoBenchOptions): Promise<DilocoBenchResult> {
  if (!(Number.isInteger(o.members) && o.members >= 1 && o.members <= 8)) throw new Error(`benchDiloco: members must be in [1, 8], got ${o.members}`);
  if (!(o.rounds >= 1 && o.warmup >= 0)) throw new Error('benchDiloco: rounds ≥ 1 and warmup ≥ 0 required');
  const tokenizer = CharTokenizer.fromText(o.text);
  const trainers: Trainer[] = [];
  const drivers: DiLoCo[] = [];
  const { transports } = LoopbackHub.group(o.members);
  const links = transports.map((t) => limitTransport(t, o.link));
  try {
    for (let i = 0; i < o.members; i++) trainers.push(await Trainer.create(o.rt, o.options, o.text, { tokenizer }));
    let loneMsPerStep: number | null = null;
    if (o.loneSteps) {
      const initial: FlatTrainingState = await trainers[0].trainingState();
      const times: number[] = [];
      await trainers[0].trainStep(); // warm-up
      for (let i = 0; i < o.loneSteps; i++) {
        const t0 = performance.now();
        await trainers[0].trainStep();
        times.push(performance.now() - t0);
      }
      loneMsPerStep = median(times);
      trainers[0].restoreTrainingState(initial);
    }
    const members = links.map((t) => t.id);
    for (let i = 0; i < o.members; i++) {
      drivers.push(new DiLoCo(trainers[i], links[i], { run: 'bench-diloco', mode: 'fp32', members, silenceMs: 120_000, diloco: o.diloco }));
    }
    const H = drivers[0].config.innerSteps;
    const per: DilocoStepStats[][] = [];
    const wall: number[] = [];
    for (let i = 0; i < (o.warmup + o.rounds) * H; i++) {
      const t0 = performance.now();
      const st = await Promise.all(drivers.map((d) => d.step()));
      if (i < o.warmup * H) continue;
      wall.push(performance.now() - t0);
      per.push(st);
    }
    const n = trainers[0].model.layout.totalFloats;
    const tokens = o.options.batch * o.options.seq;
    const sum = (f: (s: DilocoStepStats) => number) => meanOf(drivers.map((_, r) => per.reduce((a, st) => a + f(st[r]), 0)));
    const sent = sum((s) => s.exchangeBytesSent);
    const bytesPerToken = sent / (o.rounds * H * tokens);
    const fp32DpBytesPerToken = allReduceWireBytes(n, o.members, 0, 'fp32') / tokens;
    const waitMs = sum((s) => s.waitMs);
    const innerMs = sum((s) => s.innerMs);
    const heldOutMsPerRound = sum((s) => s.heldOutMs) / o.rounds;
    const losses = per.map((st) => meanOf(st.map((s) => s.loss ?? NaN)));
    return {
      members: o.members, params: n, tokensPerMemberStep: tokens,
      exchangeBytesPerRound: sent / o.rounds, bytesPerToken, fp32DpBytesPerToken,
      reduction: bytesPerToken > 0 ? fp32DpBytesPerToken / bytesPerToken : Infinity,
      waitMs, innerMs, waitShare: innerMs > 0 ? waitMs / innerMs : 0, heldOutMsPerRound,
      msPerGroupStep: median(wall), loneMsPerStep,
      lossFirst: losses[0], lossLast: losses[losses.length - 1],
    };
  } finally {
    for (const d of drivers) {
      d.stop('benchmark done');
      d.destroy();
    }
    for (const t of links) t.close();
    for (const t of trainers) t.destroy();
  }
}
