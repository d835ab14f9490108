/**
 * Data parallelism over emulated slow links: N in-process peers (one Runtime, so their GPU work
 * takes turns on one device) on a loopback hub, each endpoint behind a LimitedTransport (its own
 * egress bandwidth and one-way latency), training the same run with fp32 and with AGoQ's INT8
 * gradient exchange. Returns time per step and where it goes, per (peers, mode).
 *
 * On one device the peers' GPU work takes turns, so a peer's `computeMs` (forward/backward, readback,
 * optimizer) includes waiting for the others' work, and `msPerStep` is about N single-peer steps
 * plus communication; `commMs` is a peer's time in the exchange, reports and waiting for the
 * slowest peer, which is what the link speed moves. Subtract `N × (one peer's step)` from msPerStep,
 * or compare fp32 against int8 at equal N, to see the communication's share.
 */
import { median } from '../../engine/gpu/timer';
import type { Runtime } from '../../engine/gpu/runtime';
import type { TrainOptions } from '../../engine/train/options';
import { CharTokenizer } from '../../engine/train/tokenizer/tokenizer';
import { type FlatTrainingState, Trainer } from '../../engine/train/trainer';
import type { GradWire } from '../../engine/scheme/wire';
import { DataParallel, type DpStepStats } from './dp';
import { type LinkLimits, limitTransport } from '../../peers/transport/limiter';
import { LoopbackHub } from '../../peers/transport/loopback';

export interface DpBenchOptions {
  rt: Runtime;
  text: string;
  /** Every peer's options (batch = the local batch). */
  options: TrainOptions;
  /** Group sizes to measure (2–8). */
  peers: number[];
  modes: GradWire[];
  /** Timed steps and untimed warm-up steps per (peers, mode). */
  steps: number;
  warmup: number;
  link: LinkLimits;
  accumulate?: number;
  /** DataParallelOptions.overlap (default on): buckets sent behind backward. */
  overlap?: boolean;
  /** DataParallelOptions.bucketFloats (default its default). */
  bucketFloats?: number;
  silenceMs?: number;
}

export interface DpBenchRow {
  peers: number;
  mode: GradWire;
  scheme: string;
  /** Median wall time of a group step (all peers done). */
  msPerStep: number;
  /** Medians over steps of the mean over peers. */
  computeMs: number;
  commMs: number;
  exchangeMs: number;
  /** How much of the exchange ran behind backward (DpStepStats.overlapMs). */
  overlapMs: number;
  /** Gradient all-reduce bytes one peer sends per step, and fp32's for the same gradient. */
  exchangeBytesSent: number;
  fp32ExchangeBytes: number;
  wireRatio: number;
  /** All transport bytes one peer sends per step (exchange, reports, heartbeats). */
  bytesSent: number;
  /** Group loss of the first and last timed steps. */
  lossFirst: number;
  lossLast: number;
  samplesMs: number[];
}

const meanOf = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

export async function benchDataParallel(o: DpBenchOptions): Promise<DpBenchRow[]> {
  const maxPeers = Math.max(...o.peers);
  if (!(o.peers.length > 0 && o.peers.every((n) => Number.isInteger(n) && n >= 1 && n <= 8))) throw new Error(`benchDataParallel: peers must be in [1, 8], got ${o.peers.join(',')}`);
  if (!(o.steps >= 1 && o.warmup >= 0)) throw new Error('benchDataParallel: steps ≥ 1 and warmup ≥ 0 required');
  const tokenizer = CharTokenizer.fromText(o.text);
  const trainers: Trainer[] = [];
  try {
    for (let i = 0; i < maxPeers; i++) trainers.push(await Trainer.create(o.rt, o.options, o.text, { tokenizer }));
    const initial: FlatTrainingState = await trainers[0].trainingState();
    const rows: DpBenchRow[] = [];
    for (const n of o.peers) {
      for (const mode of o.modes) {
        for (const t of trainers.slice(0, n)) t.restoreTrainingState(initial);
        rows.push(await runGroup(o, trainers.slice(0, n), mode));
      }
    }
    return rows;
  } finally {
    for (const t of trainers) t.destroy();
  }
}

async function runGroup(o: DpBenchOptions, trainers: Trainer[], mode: GradWire): Promise<DpBenchRow> {
  const n = trainers.length;
  const { transports } = LoopbackHub.group(n);
  const links = transports.map((t) => limitTransport(t, o.link));
  const members = links.map((t) => t.id);
  const dps = trainers.map((t, i) => new DataParallel(t, links[i], {
    run: `bench-${n}-${mode}`, mode, members, accumulate: o.accumulate, overlap: o.overlap, bucketFloats: o.bucketFloats, silenceMs: o.silenceMs ?? 60_000,
  }));
  try {
    const samples: number[] = [];
    const per: DpStepStats[][] = [];
    for (let i = 0; i < o.warmup + o.steps; i++) {
      const t0 = performance.now();
      const stats = await Promise.all(dps.map((d) => d.step()));
      if (i < o.warmup) continue;
      samples.push(performance.now() - t0);
      per.push(stats);
    }
    const med = (f: (s: DpStepStats) => number) => median(per.map((ss) => meanOf(ss.map(f))));
    return {
      peers: n,
      mode,
      scheme: trainers[0].plan.scheme.name,
      msPerStep: median(samples),
      computeMs: med((s) => s.busyMs),
      commMs: med((s) => s.commMs),
      exchangeMs: med((s) => s.exchangeMs),
      overlapMs: med((s) => s.overlapMs),
      exchangeBytesSent: med((s) => s.exchangeBytesSent),
      fp32ExchangeBytes: med((s) => s.fp32ExchangeBytes),
      wireRatio: med((s) => s.wireRatio),
      bytesSent: med((s) => s.bytesSent),
      lossFirst: per[0][0].groupLoss ?? NaN,
      lossLast: per[per.length - 1][0].groupLoss ?? NaN,
      samplesMs: samples,
    };
  } finally {
    for (const d of dps) d.stop('benchmark done');
    for (const t of links) t.close();
  }
}
