/**
 * The data-parallel driver's vocabulary (dp.ts): its options and their defaults, its errors, events
 * and per-step stats, and the records its parts hand each other. Apart so the step core, the state
 * hand-over and the driver share them without importing one another.
 */
import type { GradWire } from '../../engine/scheme/wire';
import type { AllReduceMode } from '../../peers/collectives/allreduce';
import { resolveScreen, type ScreenOptions } from '../../peers/collectives/screen';
import type { PeerId } from '../../peers/transport/transport';
import type { TuneShareOptions } from './tune-share';

export interface DataParallelOptions {
  /** Names the run: peers of other runs on the same transport are ignored (reported). */
  run: string;
  /** Gradient exchange: 'fp32' or 'int8' (AGoQ's INT8 codes), all-gathered and reduced by every member. */
  mode: GradWire;
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
  /**
   * The GPU exchange sends each bucket as soon as backward has finished its layers, while the rest
   * of backward runs (default true; false: one encode after the whole backward). Same bytes, same mean.
   */
  overlap?: boolean;
  /** Frame payload bytes (PeerGroup's chunkPayload). */
  chunkPayload?: number;
  /**
   * Where the gradient exchange's numbers live (part of the fingerprint: the two average fp32
   * differently): 'gpu' (default with accumulate 1) encodes, screens and averages on the GPU over
   * the model's gradient storage (gpu-contributions.ts); 'js' reads the gradient, codes and sums it
   * on the host (the default with accumulate > 1, whose micro-batch mean is taken on the host).
   */
  exchange?: ExchangeBackend;
  /** Screening of the contributions before they are summed (dp-screen.ts; part of the fingerprint). */
  screen?: Partial<ScreenOptions>;
  /** A member's HELLO (a restart, which forces a regroup) is honoured at most once per this many ms (default 60 000). */
  restartIntervalMs?: number;
  /** Kernel tuning tables shared with the members on the same adapter (tune-share.ts); absent: none sent or taken. */
  tuneShare?: TuneShareOptions;
  onEvent?: (e: DpEvent) => void;
}

export type ExchangeBackend = 'gpu' | 'js';

export type DpErrorCode = 'diverged' | 'state-rejected' | 'config-mismatch' | 'refused' | 'no-group' | 'regroup-failed' | 'stopped' | 'removed';

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
  | 'refused' | 'reject' | 'stopped'
  /** A contribution left out of a step's mean; a member removed (faults, strikes, divergence); a state outvoted at a sync. */
  | 'screened' | 'removed' | 'outvoted'
  /** A member's message to this one was wrong or missing and was undone (an echo lie, a withheld contribution): named, not removed. */
  | 'suspect'
  /** A member's kernel tuning table taken (or not used: another adapter) (tune-share.ts). */
  | 'tuning';

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
  /** How much of the exchange ran behind backward: from the first bucket's send to backward's end (0: none). */
  overlapMs: number;
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

/** The options with their defaults filled in (members and onEvent stay with the raw options). */
export type ResolvedOptions = Required<Omit<DataParallelOptions, 'members' | 'onEvent' | 'chunkPayload' | 'screen' | 'tuneShare'>> & Pick<DataParallelOptions, 'chunkPayload'> & { screen: ScreenOptions };

/** Fills in the defaults and checks every option; a bad one throws before anything is set up. */
export function resolveOptions(opts: DataParallelOptions, id: PeerId): ResolvedOptions {
  const silenceMs = opts.silenceMs ?? 15_000;
  const o: ResolvedOptions = {
    run: opts.run,
    mode: opts.mode,
    accumulate: opts.accumulate ?? 1,
    exchange: opts.exchange ?? ((opts.accumulate ?? 1) === 1 ? 'gpu' : 'js'),
    hashEvery: opts.hashEvery ?? 1,
    silenceMs,
    collectiveTimeoutMs: opts.collectiveTimeoutMs ?? 600_000,
    joinTimeoutMs: opts.joinTimeoutMs ?? 120_000,
    heartbeatMs: opts.heartbeatMs ?? Math.max(10, silenceMs / 5),
    maxAttempts: opts.maxAttempts ?? 6,
    bucketFloats: opts.bucketFloats ?? 1 << 22,
    overlap: opts.overlap ?? true,
    stateRoundBytes: opts.stateRoundBytes ?? 16 << 20,
    chunkPayload: opts.chunkPayload,
    screen: resolveScreen(opts.screen),
    restartIntervalMs: opts.restartIntervalMs ?? 60_000,
  };
  if (typeof o.run !== 'string' || o.run.length === 0) throw new Error('DataParallel: run must be a non-empty string');
  if (o.mode !== 'fp32' && o.mode !== 'int8') throw new Error(`DataParallel: mode must be 'fp32' or 'int8', got ${String(o.mode)}`);
  for (const [k, v, min] of [['accumulate', o.accumulate, 1], ['hashEvery', o.hashEvery, 1], ['maxAttempts', o.maxAttempts, 1], ['stateRoundBytes', o.stateRoundBytes, 1]] as const) {
    if (!Number.isSafeInteger(v) || v < min) throw new Error(`DataParallel: ${k} must be an integer ≥ ${min}, got ${v}`);
  }
  if (o.exchange !== 'gpu' && o.exchange !== 'js') throw new Error(`DataParallel: exchange must be 'gpu' or 'js', got ${String(o.exchange)}`);
  if (o.exchange === 'gpu' && o.accumulate !== 1) throw new Error(`DataParallel: the 'gpu' exchange takes one micro-batch per step (accumulate ${o.accumulate}); use exchange 'js'`);
  if (!Number.isSafeInteger(o.bucketFloats) || o.bucketFloats < 256 || o.bucketFloats % 256 !== 0) throw new Error(`DataParallel: bucketFloats must be a positive multiple of 256, got ${o.bucketFloats}`);
  for (const [k, v] of [['silenceMs', o.silenceMs], ['collectiveTimeoutMs', o.collectiveTimeoutMs], ['joinTimeoutMs', o.joinTimeoutMs], ['heartbeatMs', o.heartbeatMs], ['restartIntervalMs', o.restartIntervalMs]] as const) {
    if (!(v > 0)) throw new Error(`DataParallel: ${k} must be > 0, got ${v}`);
  }
  if (opts.members) {
    const m = [...new Set(opts.members)];
    if (!m.includes(id)) throw new Error(`DataParallel: members ${JSON.stringify(opts.members)} do not include this peer (${id})`);
    if (m.length > 8) throw new Error(`DataParallel: at most 8 members, got ${m.length}`);
  }
  return o;
}

export interface Plan {
  epoch: number;
  members: PeerId[];
}

/** What the step reports agreed on. */
export interface Reported {
  groupLoss: number;
  weightsHash: number | null;
}

/** What this peer measured while applying a step. */
export interface Applied {
  loss: number;
  lr: number;
  gradNorm: number;
  exchangeBytesSent: number;
  exchangeBytesReceived: number;
  fp32ExchangeBytes: number;
  computeMs: number;
  applyMs: number;
  exchangeMs: number;
  /** See DpStepStats.overlapMs (0 where the exchange does not overlap compute). */
  overlapMs?: number;
  weightsHash: number | null;
  /** Members the step's checks remove (repeatedly screened out, faulted), with why; alike on every member. */
  removed?: [PeerId, string][];
}

/** Clock and transport counters when a step began. */
export interface StepBegin {
  t0: number;
  sent: number;
  received: number;
}
