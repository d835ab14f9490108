/**
 * Timing helpers of the tuner (and the GEMM benchmarks, src/lab/gemm.ts): operands with a fixed
 * non-zero pattern, the time of one GEMM warmed until steady, and the tuner's rounds (a job's
 * candidates timed interleaved) with the scores that rank them.
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { median, timeDispatches } from '../gpu/timer';
import type { MatmulShape } from '../kernels/matmul/plan';

/** Deterministic non-zero operand data (zeros can run faster than real data on some GPUs). */
export function fillPattern(n: number, seed: number): Float32Array {
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = (s >>> 8) / 16777216 - 0.5;
  }
  return x;
}

export interface GemmOperands {
  a: GPUBuffer;
  b: GPUBuffer;
  c: GPUBuffer;
  /** Split-K partials, when asked for. */
  workspace?: GPUBuffer;
  free(): void;
}

/** Workspace buffers for timing one shape (filled with a fixed pattern). */
export function gemmOperands(rt: Runtime, s: MatmulShape, label = 'gemm', workspaceBytes = 0): GemmOperands {
  const a = rt.upload('workspace', `${label}.a`, fillPattern(s.M * s.K, 1));
  const b = rt.upload('workspace', `${label}.b`, fillPattern(s.K * s.N, 2));
  const c = rt.createBuffer('workspace', `${label}.c`, s.M * s.N * 4);
  const workspace = workspaceBytes > 0 ? rt.createBuffer('workspace', `${label}.splitk`, workspaceBytes) : undefined;
  const all = [a, b, c, ...(workspace ? [workspace] : [])];
  return { a, b, c, workspace, free: () => all.forEach((x) => rt.mem.free(x)) };
}

/** GEMMs per timed pass by default: up to 20 of a small GEMM, so a pass is well above a GPU clock's resolution. */
export function gemmInner(s: MatmulShape): number {
  return Math.min(20, Math.max(1, Math.round(1e9 / (2 * s.M * s.N * s.K))));
}

/** Times one built GEMM (its one or two dispatches): median ms per GEMM, repeated `inner` times per pass. */
export async function timeMatmul(
  rt: Runtime, dispatches: Dispatch[], s: MatmulShape, opts: { warmup?: number; reps?: number; inner?: number; warmupMs?: number } = {},
): Promise<{ ms: number; method: 'timestamp' | 'wallclock' }> {
  const inner = opts.inner ?? gemmInner(s);
  const pass = Array.from({ length: inner }, () => dispatches).flat();
  const r = await timeDispatches(rt, pass, { warmup: opts.warmup, reps: opts.reps ?? 5, warmupMs: opts.warmupMs });
  return { ms: r.medianMs / inner, method: r.method };
}

/**
 * A round's order for `others` (candidate indices; 0 is the reference, the job's untuned pick): the
 * reference before, between and after them (0 a 0 b 0 c 0), the others rotated by one a round so that
 * none always sits at the same place in the round.
 */
export function bracketedOrder(others: readonly number[], round: number): number[] {
  const n = others.length;
  const order = [0];
  for (let j = 0; j < n; j++) order.push(others[(round + j) % n], 0);
  return order;
}

export interface RoundSamples {
  /** Per candidate, per round: its ms (NaN where it did not run); the reference's is the mean of its timings in that round. */
  samples: number[][];
  /**
   * Per candidate, per round: its ms over the mean of the reference's two timings around it (NaN
   * where it did not run; 1 for the reference).
   */
  ratios: number[][];
  /** Every timing of the reference, in order. */
  refMs: number[];
  rounds: number;
}

/**
 * Times `n` candidates in rounds, each candidate bracketed by the reference (candidate 0, the job's
 * untuned pick): 0 a 0 b 0 c 0, the others rotated by one a round (bracketedOrder). A candidate is
 * compared with the reference's timings right before and after it, so a clock that moves within a
 * round or between rounds meets both alike. (Comparing each candidate with the reference's one
 * timing elsewhere in a rotated round did not: with 12 candidates in 5 rounds the reference sat at
 * the round's start or end and each candidate at its own five places, and on an H100 whose clock
 * swung between 345 and 1,980 MHz a candidate 23 % slower by its median scored 5 % faster, s29c1.)
 * `timeRound(order)` times a round's order and resolves to each item's ms; with `pipelined` the next
 * round is asked for before this one is awaited (its work queued behind this one's, the GPU never
 * idle between rounds). `warm` runs once before the first round. After the first round a candidate
 * whose ratio is over `dropMargin` × the best (the reference's 1 included) is left out of the rounds
 * asked for after that. The signal is read before each round is asked for.
 */
export async function timeInRounds(
  n: number, timeRound: (order: number[]) => Promise<number[]>,
  o: { rounds: number; warm?: () => Promise<void>; dropMargin?: number; signal?: AbortSignal; pipelined?: boolean },
): Promise<RoundSamples> {
  const samples = Array.from({ length: n }, () => [] as number[]);
  const ratios = Array.from({ length: n }, () => [] as number[]);
  const refMs: number[] = [];
  let active = Array.from({ length: n - 1 }, (_, j) => j + 1);
  let rounds = 0;
  if (n <= 0 || o.rounds <= 0 || o.signal?.aborted) return { samples, ratios, refMs, rounds };
  await o.warm?.();
  const ask = (r: number) => {
    if (r >= o.rounds || o.signal?.aborted) return null;
    const order = bracketedOrder(active, r);
    return { order, ms: timeRound(order) };
  };
  let next = ask(0);
  for (let r = 0; next; r++) {
    const cur = next;
    next = o.pipelined ? ask(r + 1) : null;
    const ms = await cur.ms;
    if (ms.length !== cur.order.length) throw new Error(`tune: a round of ${cur.order.length} timings gave ${ms.length}`);
    const refs = cur.order.flatMap((c, k) => (c === 0 ? [ms[k]] : []));
    refMs.push(...refs);
    samples[0].push(refs.reduce((a, b) => a + b, 0) / refs.length);
    ratios[0].push(1);
    for (let i = 1; i < n; i++) {
      const k = cur.order.indexOf(i);
      samples[i].push(k < 0 ? NaN : ms[k]);
      ratios[i].push(k < 0 ? NaN : ms[k] / ((ms[k - 1] + ms[k + 1]) / 2));
    }
    rounds++;
    if (r === 0 && o.dropMargin !== undefined) {
      const best = Math.min(...ratios.map((x) => x[0]));
      active = active.filter((i) => ratios[i][0] <= o.dropMargin! * best);
    }
    if (!o.pipelined) next = ask(r + 1);
  }
  return { samples, ratios, refMs, rounds };
}

/**
 * Each candidate's median ms over its rounds, and its score: the median over the rounds of its ratio
 * to the reference around it (timeInRounds), times the reference's median, so ms on the reference's
 * scale; the pick is the lowest score. The spread is the reference's slowest timing over its fastest
 * (1 on a steady clock): how far the clock moved while the job was timed.
 */
export function roundScores(r: Pick<RoundSamples, 'samples' | 'ratios' | 'refMs'>): { medianMs: number[]; score: number[]; refSpread: number } {
  const ran = (s: number[]) => s.filter((x) => !Number.isNaN(x));
  const medianMs = r.samples.map((s) => median(ran(s)));
  const refMedian = medianMs[0];
  const score = r.ratios.map((s, i) => (i === 0 ? refMedian : median(ran(s)) * refMedian));
  const refSpread = r.refMs.length ? Math.max(...r.refMs) / Math.min(...r.refMs) : NaN;
  return { medianMs, score, refSpread };
}
