/**
 * The in-product tuner: for the kernel choices a run makes (./jobs.ts), the candidates that fit the
 * adapter's limits (checked before anything is compiled), each checked on the device against its
 * reference (the float64 GEMM and attention references on small shapes of the same form), then
 * built on the run's shape and timed there, a job's candidates interleaved in rounds after the
 * GPU's clock is raised; the fastest becomes this device's pick (store.ts) and a cache entry
 * (cache.ts). Incremental (jobs the cache already holds for this adapter and code are skipped),
 * budgeted (no new candidate starts past the budget; a job cut short is not recorded), cancellable
 * (AbortSignal, checked between candidates and between rounds) and reporting progress with an estimate.
 */
import type { Runtime } from '../gpu/runtime';
import { type AdapterKey, adapterKeyOf } from './adapter';
import { attentionCandidates, prepareAttention } from './attention';
import { type TuneCache, type TuneEntry } from './cache';
import { type BuiltCandidate, type Candidate, type CandidateOptions, type PreparedJob, timeBuiltInRounds } from './candidate';
import { f16AttnJobCandidates, prepareF16Attention } from './f16-attention';
import { f16GemmCandidates, prepareF16Gemm } from './f16-gemm';
import { i8GemmCandidates, prepareI8Gemm } from './i8-gemm';
import { i8QuantCandidates, prepareI8Quant } from './i8-quant';
import { matmulCandidates, prepareMatmul } from './gemm';
import type { TuneJob } from './jobs';
import { setTunedPicks } from './store';

// The job kinds' helpers the benchmarks (bench/autotune.ts, attn-i8-tune.ts) take from here.
export { relErr } from './attention';
export { matmulCandidateProblem } from './gemm';

export interface TuneOptions extends CandidateOptions {
  /** Seconds after which no new candidate starts (default 90). */
  budgetS?: number;
  signal?: AbortSignal;
  onProgress?: (p: TuneProgress) => void;
  /** Re-time jobs the cache already holds. */
  force?: boolean;
  /** How much faster (a fraction, by its score: measure.ts roundScores) a candidate must time than the job's first to replace it (default 0.05; keepRanking). */
  keepMargin?: number;
  /** How a job's candidates are made (default prepareJob); tests wrap it to give candidates a known cost. */
  prepare?: (rt: Runtime, j: TuneJob, o: CandidateOptions) => PreparedJob;
}

export interface TuneProgress {
  phase: 'check' | 'time' | 'done';
  /** The job being tuned (its label), jobs done and all jobs. */
  job: string;
  jobsDone: number;
  jobs: number;
  candidate?: string;
  /** Candidates checked or timed so far, of all the jobs' candidates. */
  done: number;
  total: number;
  elapsedS: number;
  /** Seconds still to go (an estimate from the candidates so far), capped by the budget left. */
  remainingS: number;
}

/** A job tuned now: its pick's and its untuned pick's median ms over the rounds they were timed in (the device log's evidence). */
export interface TunedJob {
  key: string;
  label: string;
  pick: string;
  ms: number;
  /** The job's first candidate (what the run uses untuned) and its median ms; none where it failed its check or did not build. */
  untuned: string;
  untunedMs?: number;
  /** Candidates timed, and the rounds they were timed in together. */
  candidates: number;
  rounds: number;
  /** The untuned pick's slowest timing in the rounds over its fastest (candidate.ts RoundTimes): near 1 where the clock held. */
  untunedSpread?: number;
}

/** A tuned job's line in a tune's log: the pick's and the untuned pick's medians and the rounds they come from (4 decimals). */
export function tunedJobWords(t: TunedJob): string {
  const ms = (x: number) => `${x.toFixed(4)} ms`;
  const spread = t.untunedSpread !== undefined && Number.isFinite(t.untunedSpread) ? `, untuned spread ${t.untunedSpread.toFixed(2)}x` : '';
  const of = `medians of ${t.rounds} round${t.rounds === 1 ? '' : 's'}, ${t.candidates} candidate${t.candidates === 1 ? '' : 's'}${spread}`;
  if (t.pick === t.untuned) return `${t.label}: kept the untuned ${t.pick} ${ms(t.ms)} (${of})`;
  const before = t.untunedMs === undefined ? `untuned ${t.untuned} not timed` : `untuned ${t.untuned} ${ms(t.untunedMs)}, ${(t.untunedMs / t.ms).toFixed(2)}x`;
  return `${t.label}: ${t.pick} ${ms(t.ms)} (${before}; ${of})`;
}

export interface TuneOutcome {
  adapter: AdapterKey;
  /** Jobs tuned now, jobs the cache already held, jobs not finished (budget, cancel, no candidate). */
  tuned: TunedJob[];
  cached: string[];
  unfinished: { key: string; why: string }[];
  /** Candidates left out before compiling (over the adapter's limits) or after (failed the check, or did not build). */
  rejected: { job: string; candidate: string; why: string }[];
  elapsedS: number;
  cancelled: boolean;
  outOfBudget: boolean;
}

// ---- the tuner ----------------------------------------------------------------------------------

/** The jobs the cache lacks for this adapter and the current code (all with `force`). */
export function missingJobs(jobs: readonly TuneJob[], cache: TuneCache, adapter: AdapterKey, force = false): TuneJob[] {
  return jobs.filter((j) => {
    if (force) return true;
    const e = cache.get(adapter, j.family, j.key);
    // A GEMM tuned with less workspace than this call has may miss a faster split; a member's shared pick gives way to this device's own tune.
    return !e || e.sharedBy !== undefined || (j.family === 'matmul' && (e.workspaceBytes ?? 0) < j.workspaceBytes);
  });
}

const isFallback = (j: TuneJob) => j.family === 'matmul' && !!j.fallback;
/** A job whose calls all lie outside the training step (the sampling decoder's prefill). */
const isOffStep = (j: TuneJob) => j.family === 'matmul' && !!j.offStep;
/** Tuned after the rest, in the second phase with only what the rest leave of the budget. */
const isLate = (j: TuneJob) => isFallback(j) || isOffStep(j);

/** A software adapter (SwiftShader, llvmpipe/lavapipe, WARP). */
export function isCpuAdapter(a: AdapterKey): boolean {
  return /swiftshader|llvmpipe|lavapipe|warp|software|cpu/i.test(`${a.vendor} ${a.architecture} ${a.device} ${a.description}`);
}

/**
 * The options a tune runs with on this device: on a CPU adapter (SwiftShader: seconds to compile
 * each GEMM pipeline, and times that say nothing about a GPU) the first two candidates of each
 * choice (the shipped or heuristic pick first), no wait for a steady clock, two rounds of one timed
 * pass of 4 GEMMs after one warm-up run (a small GEMM takes ~1 ms there, far above the wall clock's
 * resolution), and one round for a candidate over 1.5× the first round's fastest.
 */
export function deviceTuneOptions(rt: Runtime, o: TuneOptions = {}): TuneOptions {
  if (!isCpuAdapter(adapterKeyOf(rt.gpu.adapterInfo))) return o;
  return { maxGemmCandidates: 2, maxAttentionCandidates: 2, warmup: 1, rounds: 2, reps: 1, gemmInner: 4, earlyStopMargin: 1.5, settleMs: 0, ...o };
}

/** A job's candidates, by its kind (./gemm.ts, f16-gemm.ts, i8-gemm.ts, i8-quant.ts, f16-attention.ts, attention.ts). */
export function prepareJob(rt: Runtime, j: TuneJob, o: CandidateOptions): PreparedJob {
  return j.family === 'matmul' ? prepareMatmul(rt, j, o) : j.family === 'f16gemm' ? prepareF16Gemm(rt, j, o)
    : j.family === 'i8tc' ? prepareI8Gemm(rt, j, o) : j.family === 'i8quant' ? prepareI8Quant(rt, j, o) : j.family === 'f16attn' ? prepareF16Attention(rt, j, o) : prepareAttention(rt, j, o);
}

/** First guess of one candidate's seconds (compile, check, warm-up, timing) before any is measured; a CPU adapter compiles a GEMM for seconds. */
function guessS(rt: Runtime): number {
  return isCpuAdapter(adapterKeyOf(rt.gpu.adapterInfo)) ? 2.5 : 0.25;
}

/**
 * Tunes the jobs the cache lacks on this device: writes each finished job into the cache and the
 * device's picks (so the kernels built after this use them), and applies the cache's other current
 * entries for this adapter too. Returns what it did; throws only on a lost device.
 */
export async function tuneJobs(rt: Runtime, jobs: readonly TuneJob[], cache: TuneCache, o: TuneOptions = {}): Promise<TuneOutcome> {
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  const budgetS = o.budgetS ?? 90;
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  o = deviceTuneOptions(rt, o);
  cache.applyTo(rt.device, adapter);
  // f16 GEMMs' fp32 fallbacks last: on a device with f16 tensor cores they do not run, and the budget ran out before
  // the f16 attention's jobs on the H100 (s28c4); where the f16 jobs have no candidates they take no time.
  // And the decoder's prefill GEMMs, which no training step runs (s33c2: 6 of int8-attn's 19 choices took a share each).
  const todo = missingJobs(jobs, cache, adapter, o.force).sort((a, b) => Number(isLate(a)) - Number(isLate(b)));
  const outcome: TuneOutcome = {
    adapter, tuned: [], cached: jobs.filter((j) => !todo.includes(j)).map((j) => j.key), unfinished: [], rejected: [],
    elapsedS: 0, cancelled: false, outOfBudget: false,
  };
  const prepared = todo.map((j) => (o.prepare ?? prepareJob)(rt, j, o));
  let done = 0;
  let spent = 0;
  const guess = guessS(rt);
  const perCandidate = () => (done > 0 ? spent / done : guess);
  // The second phase's own cost per candidate (checks memoized across jobs, timings shared in rounds), which the first
  // phase's lone compile-and-time overstates (s33c3: ~1.3 s there, so a 0.5 s share per job let most jobs time nothing).
  // Before any is measured: none, so a job with time in its share tries a candidate.
  let done2 = 0;
  let spent2 = 0;
  const perCandidate2 = () => (done2 > 0 ? spent2 / done2 : 0);
  // Two phases. First every job's first candidate (the shipped or heuristic pick: what the run would
  // compile anyway), so a slow device (a CPU adapter compiling each pipeline for seconds) covers
  // every choice before any gets a second look; then each job's other candidates within an equal
  // share of what is left of the budget. Past the whole budget no candidate starts.
  /** Per job: each timed candidate's score (the ranking, measure.ts roundScores), its median ms, and the rounds timed. */
  const times = prepared.map(() => new Map<string, number>());
  const medians = prepared.map(() => new Map<string, number>());
  const roundsOf = prepared.map(() => 0);
  const spreadOf = prepared.map(() => NaN);
  const shareS = (jobsLeft: number) => Math.max(0, budgetS - elapsed()) / Math.max(1, jobsLeft);
  let total = prepared.reduce((n, p) => n + Math.min(1, p.candidates.length), 0);
  const progress = (phase: TuneProgress['phase'], jobIndex: number, candidate?: string) => {
    o.onProgress?.({
      phase, job: prepared[jobIndex]?.job.label ?? '', jobsDone: jobIndex, jobs: prepared.length, candidate, done, total,
      elapsedS: elapsed(), remainingS: Math.max(0, Math.min((total - done) * perCandidate(), budgetS - elapsed())),
    });
  };
  let stop: string | null = null;
  /** Checks a candidate against its reference; false, with the rejection noted, where it fails. */
  const check = async (i: number, c: Candidate): Promise<boolean> => {
    progress('check', i, c.name);
    const problem = await c.check();
    if (problem) outcome.rejected.push({ job: prepared[i].job.key, candidate: c.name, why: problem });
    return !problem;
  };
  /** One candidate's work, counted for the estimate per candidate (and the second phase's own, `second`). */
  const counted = async (work: () => Promise<void>, second = false) => {
    const c0 = performance.now();
    await work();
    const t = (performance.now() - c0) / 1000;
    done++;
    spent += t;
    if (second) {
      done2++;
      spent2 += t;
    }
  };
  /**
   * Builds checked candidates (one that does not build is rejected), then times them interleaved in
   * rounds (candidate.ts timeBuiltInRounds): all CPU work of the job before any of its timing, since
   * a GPU's clock falls while the CPU compiles and checks (an H100 sat at 345 of 1,980 MHz through a
   * tune's checks, s28c3). Their times replace the job's earlier ones.
   */
  const timeJob = async (i: number, cs: Candidate[], untilS = Infinity) => {
    const built: { c: Candidate; b: BuiltCandidate }[] = [];
    // Rounds past `untilS` (the budget's end, for the second phase) do not start: the rounds done so far rank the candidates.
    const until = new AbortController();
    const onAbort = () => until.abort();
    o.signal?.addEventListener('abort', onAbort);
    const timer = Number.isFinite(untilS) ? setTimeout(onAbort, Math.max(0, untilS - elapsed()) * 1000) : undefined;
    try {
      for (const c of cs) {
        if (until.signal.aborted) break;
        try {
          built.push({ c, b: await c.build() });
        } catch (e) {
          outcome.rejected.push({ job: prepared[i].job.key, candidate: c.name, why: `does not build: ${(e as Error).message}` });
        }
      }
      if (!built.length) return;
      if (until.signal.aborted) return;
      const r = await timeBuiltInRounds(rt, built.map((x) => x.b), { ...o, signal: until.signal }, (k) => progress('time', i, built[k].c.name));
      if (!r.rounds) return;
      times[i] = new Map(built.map((x, k) => [x.c.name, r.score[k]]));
      medians[i] = new Map(built.map((x, k) => [x.c.name, r.medianMs[k]]));
      roundsOf[i] = r.rounds;
      spreadOf[i] = r.refSpread;
    } finally {
      clearTimeout(timer);
      o.signal?.removeEventListener('abort', onAbort);
      for (const x of built) x.b.free();
    }
  };
  const stopped = () => {
    if (o.signal?.aborted) stop = 'cancelled';
    else if (elapsed() > budgetS) stop = `out of the ${budgetS} s budget`;
    return stop !== null;
  };
  try {
    for (const [i, p] of prepared.entries()) {
      for (const r of p.rejected) outcome.rejected.push({ job: p.job.key, ...r });
      // A first candidate that fails its check hands the first phase to the next one.
      for (const c of p.candidates) {
        if (stopped()) break;
        await counted(async () => {
          if (await check(i, c)) await timeJob(i, [c]);
        });
        if (times[i].size > 0) break;
      }
      p.free(); // a job's operands live while it is timed only
    }
    total = done + prepared.reduce((n, p, i) => n + p.candidates.length - Math.min(p.candidates.length, times[i].size), 0);
    const steps = prepared.filter((p) => !isLate(p.job)).length;
    for (const [i, p] of prepared.entries()) {
      // The step's jobs share the budget among themselves; the late ones (sorted last) what is left of it.
      const deadline = elapsed() + shareS((isLate(p.job) ? prepared.length : steps) - i);
      // Checks first, then every passing candidate (the first phase's one again, the reference) timed in rounds.
      const passing: Candidate[] = times[i].size ? p.candidates.filter((c) => times[i].has(c.name)) : [];
      for (const c of p.candidates) {
        if (times[i].has(c.name) || outcome.rejected.some((r) => r.job === p.job.key && r.candidate === c.name)) continue;
        if (stopped() || elapsed() + perCandidate2() > deadline) break;
        await counted(async () => {
          if (await check(i, c)) passing.push(c);
        }, true);
      }
      if (passing.length > 1 && !stopped()) {
        const t0 = performance.now();
        await timeJob(i, passing, budgetS);
        const t = (performance.now() - t0) / 1000; // the estimates per candidate cover its timing too
        spent += t;
        spent2 += t;
      }
      p.free();
    }
  } finally {
    for (const p of prepared) p.free();
  }
  if (stop === 'cancelled') outcome.cancelled = true;
  else if (stop) outcome.outOfBudget = true;
  for (const [i, p] of prepared.entries()) {
    // A job keeps the best of what it timed (cancelled or out of budget alike); one that timed none is unfinished.
    if (times[i].size === 0) {
      // A job with no candidate at all says why (e.g. skipped: no shader-f16), whatever stopped the others.
      const none = p.candidates.length === 0 ? (p.rejected[0]?.why ?? 'no candidate fits this device') : null;
      outcome.unfinished.push({ key: p.job.key, why: none ?? stop ?? 'no candidate passed its check' });
      continue;
    }
    // The job's first candidate is what the run would use untuned: another replaces it only by keepRanking's rule.
    const first = p.candidates[0]?.name;
    const ranked = keepRanking(times[i], medians[i], first, o.keepMargin ?? 0.05);
    const picks = p.picks(ranked);
    const entry: TuneEntry = {
      picks, ms: medians[i].get(picks[0])!, candidates: times[i].size, at: new Date().toISOString(),
      ...(p.job.family === 'matmul' ? { workspaceBytes: p.job.workspaceBytes } : {}),
    };
    cache.put(adapter, p.job.family, p.job.key, entry);
    setTunedPicks(rt.device, p.job.family, p.job.key, picks);
    outcome.tuned.push({
      key: p.job.key, label: p.job.label, pick: picks[0], ms: entry.ms, untuned: first, untunedMs: medians[i].get(first),
      candidates: times[i].size, rounds: roundsOf[i], ...(Number.isFinite(spreadOf[i]) ? { untunedSpread: spreadOf[i] } : {}),
    });
  }
  outcome.elapsedS = elapsed();
  progress('done', prepared.length);
  return outcome;
}

/**
 * The ranking a job's picks follow (lowest first): the candidates' scores, except that the untuned
 * pick (`first`, what the run would use: a shipped table's or the heuristic's pick, chosen from whole
 * steps) stays first unless another scores faster by `margin`, and a candidate whose own median is
 * not below the untuned pick's never ranks before it, whatever its score: on the H100 a full tune's
 * picks, each faster alone, made the base f16 step 4 % slower together (s28c4), and one pick whose
 * median was 23 % over the untuned's scored 5 % under it (s29c1).
 */
export function keepRanking(scores: ReadonlyMap<string, number>, medians: ReadonlyMap<string, number>, first: string | undefined, margin: number): Map<string, number> {
  const ranked = new Map(scores);
  if (first === undefined || !ranked.has(first)) return ranked;
  const firstMs = medians.get(first)!;
  const refScore = ranked.get(first)!;
  for (const [name, score] of ranked) {
    if (name !== first && !(medians.get(name)! < firstMs) && score <= refScore) ranked.set(name, refScore + 1e-9 * (1 + score)); // their order kept
  }
  const best = Math.min(...ranked.values());
  if (ranked.get(first)! <= best * (1 + margin)) ranked.set(first, best - 1e-9);
  return ranked;
}

/** Candidates and a first estimate of the seconds a tune of these jobs takes on this device (before any is timed). */
export function tuneEstimate(rt: Runtime, jobs: readonly TuneJob[], o: TuneOptions = {}): { candidates: number; seconds: number } {
  o = deviceTuneOptions(rt, o);
  let candidates = 0;
  for (const j of jobs) {
    candidates += j.family === 'matmul' ? matmulCandidates(rt, j, { max: o.maxGemmCandidates, streamK: o.streamK }).candidates.length
      : j.family === 'f16gemm' ? f16GemmCandidates(rt, j, o.maxGemmCandidates).candidates.length
      : j.family === 'i8tc' ? i8GemmCandidates(rt, j, o.maxGemmCandidates).candidates.length
      : j.family === 'i8quant' ? i8QuantCandidates(rt, j).length
      : j.family === 'f16attn' ? f16AttnJobCandidates(rt, j, o.maxAttentionCandidates).candidates.length
      : attentionCandidates(rt, j.kernel, j.shape.D, j.shape.T, o.maxAttentionCandidates).candidates.length;
  }
  return { candidates, seconds: Math.min(candidates * guessS(rt), o.budgetS ?? 90) };
}

