/**
 * What the tuner's job kinds (./gemm.ts, ./attention.ts) give it: a job's candidates, each checked
 * against its reference and built on the run's shape, with the options they read and the timing
 * they share (a job's candidates timed interleaved in rounds after the clock is raised).
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { timeSequence, warmUntilSteady } from '../gpu/timer';
import type { TuneJob } from './jobs';
import { roundScores, timeInRounds } from './measure';

/** How candidates are chosen and timed (part of the tuner's options, tuner.ts TuneOptions). */
export interface CandidateOptions {
  /** Rounds a job's candidates are timed in, interleaved (measure.ts timeInRounds; default 5). */
  rounds?: number;
  /** Timed passes per candidate in each round, in one submit (their median is the round's time; default 3). */
  reps?: number;
  /** Untimed runs of each candidate before its first timed pass (default 1). */
  warmup?: number;
  /**
   * At most this many ms running the job's untuned kernel until its time per run holds within 2 %
   * before the first round (default 1000; 0 on a CPU adapter, which has no clock to raise).
   */
  settleMs?: number;
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
   * A candidate whose first round's ratio to the untuned pick around it is over this many times that
   * round's best (the untuned's 1 included) times no more rounds (default: every candidate runs every
   * round; 1.5 on a CPU adapter).
   */
  earlyStopMargin?: number;
}

/** A candidate compiled on its job's operands (the run's shape): one timed pass runs `dispatches`, `inner` runs of the kernel. */
export interface BuiltCandidate {
  dispatches: Dispatch[];
  inner: number;
  free(): void;
}

/**
 * A GEMM candidate built once in each form its job's calls take (jobs.ts callForms: writing C, accumulating
 * into it), one pass running the forms in turn: about `inner` GEMMs, rounded to whole turns, so its time per
 * GEMM weighs the forms as the step's calls do.
 */
export async function builtInForms(rt: Runtime, forms: readonly boolean[], inner: number,
  build: (accumulate: boolean) => Promise<{ dispatches: Dispatch[]; uniforms: GPUBuffer[] }>): Promise<BuiltCandidate> {
  const built = new Map<boolean, { dispatches: Dispatch[]; uniforms: GPUBuffer[] }>();
  const free = () => [...built.values()].forEach((b) => b.uniforms.forEach((u) => rt.mem.free(u)));
  try {
    for (const acc of new Set(forms)) built.set(acc, await build(acc));
  } catch (e) {
    free();
    throw e;
  }
  const n = Math.max(forms.length, Math.round(inner / forms.length) * forms.length);
  return { dispatches: Array.from({ length: n }, (_, i) => built.get(forms[i % forms.length])!.dispatches).flat(), inner: n, free };
}

/** A candidate of a job: its name, how to check it against its reference, and how to time it on the run's shape. */
export interface Candidate {
  name: string;
  /** Null when it passes; a problem otherwise. Shared checks are memoized per device. */
  check(): Promise<string | null>;
  /** Compiles it on the job's operands, ready to time (throws when it does not build). */
  build(): Promise<BuiltCandidate>;
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

export interface RoundTimes {
  /** Per candidate (as given): its median ms a run over its rounds, and its score (measure.ts roundScores; the lowest wins). */
  medianMs: number[];
  score: number[];
  rounds: number;
  /** The untuned pick's slowest timing over its fastest in the rounds (measure.ts roundScores): 1 on a steady clock. */
  refSpread: number;
}

/**
 * Times a job's built candidates in rounds, each bracketed by the first (the job's untuned pick; the
 * reference: measure.ts timeInRounds). Before the first round the reference runs until its time per
 * run holds within 2 % (at least 0.5 s where there are others, at most settleMs), so the GPU's
 * clock is up; then each round is one submit (timer.ts timeSequence) and the next round is submitted
 * before this one is read, so the GPU runs the rounds without a gap for its clock to fall in. Each candidate's first use is an untimed run
 * in the first round (the reference's is the settle, where there is one).
 */
export async function timeBuiltInRounds(
  rt: Runtime, built: readonly BuiltCandidate[], o: CandidateOptions & { signal?: AbortSignal }, onTime?: (i: number) => void,
): Promise<RoundTimes> {
  const ref = built[0];
  const settleMs = o.settleMs ?? 1000;
  let first = true;
  const timeRound = (order: number[]) => {
    const seen = new Set<number>();
    const items = order.map((i) => {
      const warmup = first && !seen.has(i) && (i > 0 || settleMs <= 0) ? (o.warmup ?? 1) : 0; // the reference ran in the settle
      seen.add(i);
      return { dispatches: built[i].dispatches, warmup, reps: o.reps ?? 3 };
    });
    first = false;
    order.forEach((i) => onTime?.(i));
    return timeSequence(rt, items).then((ms) => ms.map((x, k) => x / built[order[k]].inner));
  };
  const r = await timeInRounds(built.length, timeRound, {
    rounds: o.rounds ?? 5, dropMargin: o.earlyStopMargin, signal: o.signal, pipelined: !!rt.gpu.features.timestampQuery,
    warm: async () => {
      // Half a second at least where candidates are compared: an idle H100 still read 345 MHz after ~0.3 s at full load
      // (s29c1's nvidia-smi), long enough to look steady. A lone candidate's time is only recorded.
      if (settleMs > 0) await warmUntilSteady(rt, ref.dispatches, built.length > 1 ? Math.min(500, settleMs) : 0, settleMs, 0.02);
    },
  });
  const s = roundScores(r);
  return { ...s, rounds: r.rounds };
}
