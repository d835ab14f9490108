/**
 * Timing helpers of the tuner (and the GEMM benchmarks, src/lab/gemm.ts): operands with a fixed
 * non-zero pattern and the time of one GEMM, warmed until steady.
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
 * Times a candidate against the job's leader so far: one timed sample first, and the rest of `reps`
 * only when that sample is not clearly behind, i.e. not over `margin` × the leader's time (a clear
 * loser keeps its one sample: nothing more would make it the pick). Without a leader, all `reps`.
 * `sample(n)` times n repetitions and returns their ms each. Returns the median.
 */
export async function timeAgainstLeader(
  sample: (reps: number) => Promise<number[]>, reps: number, leaderMs: number | undefined, margin: number,
): Promise<{ ms: number; samples: number[]; early: boolean }> {
  const first = await sample(leaderMs === undefined ? reps : 1);
  if (first.length >= reps || (leaderMs !== undefined && first[0] > margin * leaderMs)) {
    return { ms: median(first), samples: first, early: first.length < reps };
  }
  const all = [...first, ...(await sample(reps - first.length))];
  return { ms: median(all), samples: all, early: false };
}
