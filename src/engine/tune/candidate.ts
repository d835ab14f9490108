/**
 * What the tuner's job kinds (./gemm.ts, ./attention.ts) give it: a job's candidates, each checked
 * against its reference and timed on the run's shape, with the options they read and the timing
 * they share (warm-up, repetitions, early stop against the job's leader).
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { timeDispatches } from '../gpu/timer';
import type { TuneJob } from './jobs';
import { timeAgainstLeader } from './measure';

/** How candidates are chosen and timed (part of the tuner's options, tuner.ts TuneOptions). */
export interface CandidateOptions {
  /** Timed repetitions per candidate (median; default 5). */
  reps?: number;
  /** Run each candidate until its time per run is steady, at least this many ms (default 30). */
  warmupMs?: number;
  /** Runs of the candidate before timing (default 2). */
  warmup?: number;
  /** GEMMs per timed pass (default: measure.ts gemmInner, up to 20 for a small GEMM on a GPU's clock). */
  gemmInner?: number;
  /** Most GEMM candidates timed per shape, ranked by the cost model with the shipped picks first (default 14; 2 on a CPU adapter). */
  maxGemmCandidates?: number;
  /** Most attention tiles timed per kernel, the shipped and default tile first (default all that fit; 2 on a CPU adapter). */
  maxAttentionCandidates?: number;
  /**
   * Stream-K workgroup counts to try (WebGPU does not say how many workgroups a GPU holds at once);
   * default: the counts the shipped picks for this shape name.
   */
  streamK?: readonly number[];
  /**
   * A candidate whose first timed sample is over this many times the job's fastest so far gets no
   * more samples (default: every candidate gets `reps`; 1.5 on a CPU adapter).
   */
  earlyStopMargin?: number;
}

/** A candidate of a job: its name, how to check it against its reference, and how to time it on the run's shape. */
export interface Candidate {
  name: string;
  /** Null when it passes; a problem otherwise. Shared checks are memoized per device. */
  check(): Promise<string | null>;
  /** Its ms on the run's shape; `leaderMs`, the job's fastest so far, lets a clear loser stop early. */
  time(leaderMs?: number): Promise<number>;
}

export interface PreparedJob {
  job: TuneJob;
  candidates: Candidate[];
  rejected: { candidate: string; why: string }[];
  /** Turns the timings into the cache entry's picks (best first). */
  picks(times: Map<string, number>): string[];
  free(): void;
}

const checks = new WeakMap<object, Map<string, Promise<string | null>>>();

/** Memoized per device: a check already run for this key is not run again in this session. */
export function memoCheck(rt: Runtime, key: string, run: () => Promise<string | null>): Promise<string | null> {
  let m = checks.get(rt.device);
  if (!m) checks.set(rt.device, (m = new Map()));
  let p = m.get(key);
  if (!p) m.set(key, (p = run().catch((e: Error) => `does not build: ${e.message}`)));
  return p;
}

/**
 * Times a candidate's dispatches (`inner` runs of the kernel each): warmed as the options say, then
 * `reps` samples, or one when that one is clearly behind the job's leader (earlyStopMargin). Median ms per run.
 */
export async function timeCandidate(rt: Runtime, dispatches: Dispatch[], inner: number, o: CandidateOptions, leaderMs: number | undefined): Promise<number> {
  let warm = true;
  const sample = async (reps: number) => {
    const r = await timeDispatches(rt, dispatches, warm ? { warmup: o.warmup ?? 2, reps, warmupMs: o.warmupMs ?? 30 } : { warmup: 0, reps });
    warm = false;
    return r.samplesMs.map((ms) => ms / inner);
  };
  const margin = o.earlyStopMargin;
  return (await timeAgainstLeader(sample, o.reps ?? 5, margin === undefined ? undefined : leaderMs, margin ?? Infinity)).ms;
}
