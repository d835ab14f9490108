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
 * Times `n` candidates interleaved in rounds: before each round `warm(round)` (the tuner runs the
 * job's untuned kernel there, so the clock is up as the round starts), then each candidate still in
 * once, the order rotated by one a round (A B C, B C A, C A B, …) so none always comes first after
 * the warm-up. A clock that drifts meets every candidate alike, where back-to-back timing (all of
 * A's samples, then all of B's) hands each its own clock: an H100 timed same-FLOP GEMMs at 0.83 and
 * 0.33 ms that way (s28c3). After the first round a candidate over `dropMargin` × that round's
 * fastest times no more rounds (the first candidate, the reference, always stays). The signal is
 * read between rounds. Returns each candidate's ms per round (NaN where it did not run) and the
 * rounds run.
 */
export async function timeInRounds(
  n: number, time: (i: number) => Promise<number>,
  o: { rounds: number; warm?: (round: number) => Promise<void>; dropMargin?: number; signal?: AbortSignal },
): Promise<{ samples: number[][]; rounds: number }> {
  const samples = Array.from({ length: n }, () => [] as number[]);
  const inRounds = Array.from({ length: n }, () => true);
  let rounds = 0;
  for (let r = 0; r < o.rounds && n > 0 && !o.signal?.aborted; r++) {
    await o.warm?.(r);
    for (let j = 0; j < n; j++) {
      const i = (r + j) % n;
      samples[i].push(inRounds[i] ? await time(i) : NaN);
    }
    rounds++;
    if (r === 0 && o.dropMargin !== undefined) {
      const best = Math.min(...samples.map((s) => s[0]));
      samples.forEach((s, i) => (inRounds[i] = i === 0 || s[0] <= o.dropMargin! * best));
    }
  }
  return { samples, rounds };
}

/**
 * Each candidate's median ms over its rounds, and its score: the median over the rounds of its time
 * over the reference's (candidate `ref`, the job's untuned pick) in the same round, times the
 * reference's median. The score is ms on the reference's scale, compared within rounds, so a clock
 * that moves between rounds cancels; the pick is the lowest score.
 */
export function roundScores(samples: number[][], ref = 0): { medianMs: number; score: number }[] {
  const ranOf = (s: number[]) => s.filter((x) => !Number.isNaN(x));
  const refMs = median(ranOf(samples[ref] ?? []));
  return samples.map((s, i) => {
    const medianMs = median(ranOf(s));
    if (i === ref) return { medianMs, score: refMs };
    const ratios = s.flatMap((x, r) => (Number.isNaN(x) || !(samples[ref][r] > 0) ? [] : [x / samples[ref][r]]));
    return { medianMs, score: ratios.length ? median(ratios) * refMs : medianMs };
  });
}
