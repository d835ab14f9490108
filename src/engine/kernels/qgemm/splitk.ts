/**
 * Split-K for qgemmI8, for the weight-gradient GEMMs over all tokens (dW = dYᵀ·X: M×N a few
 * hundred to a few thousand, K = the step's tokens), whose output tiles alone leave most of the
 * GPU idle. Their scales are per channel over all of K, so they do not depend on the K slice: the
 * K range is cut into S slices run side by side (grid z), each writing its raw i32 sums to a
 * workspace [S, M, N], and a second pass (src/engine/kernels/qgemm/splitk.wgsl) adds the S partials in i32 —
 * exact, the same integer as one pass — and applies the unsplit kernels' dequantizing epilogue, so
 * the result is the same bits. Both kernels (dot4, tensor cores) cut K here, in their own units
 * (words, vec4s) and K steps; the slice count comes from chooseI8SplitK or is forced.
 */
import reduceSrc from './splitk.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';
import { asSlice, bindingBytes, grid2d } from '../launch';
import { SPLIT_COUNTS, splitPlan } from '../matmul/plan';

/**
 * Longest K whose i32 sums cannot overflow: |Σ_k x·w| ≤ K·128·128 < 2^31 for any int8 codes (the
 * quantizers write −127..127; −128 counted too). A split adds the same terms, so the same bound holds.
 */
export const I8_MAX_K = Math.floor((2 ** 31 - 1) / (128 * 128));

/** Throws when a K-long INT8 dot product could overflow i32 (the GEMMs sum exactly in i32). */
export function checkI8SumFits(label: string, K: number): void {
  if (K > I8_MAX_K) throw new Error(`${label}: K=${K} risks i32 overflow (at most ${I8_MAX_K})`);
}

/** How one kernel cuts K: `kChunk` units of K (a whole number of the kernel's K steps) per slice, `parts` slices. */
export interface I8Slices {
  kChunk: number;
  parts: number;
  /** The raw i32 partials [parts, M, N]. */
  workspace: Binding;
}

/** What the split choice knows of a kernel on a shape. */
export interface I8SplitShape {
  M: number;
  N: number;
  /** Output block of one workgroup, and its threads. */
  BM: number;
  BN: number;
  threads: number;
  /** K in the kernel's units (words, vec4s) and its K step in those units. */
  kUnits: number;
  step: number;
}

export const i8SplitWorkspaceBytes = (M: number, N: number, parts: number) => (parts > 1 ? parts * M * N * 4 : 0);

/**
 * The slices a kernel runs for S requested slices (fewer when K has fewer steps; 1 = one pass),
 * or an error where the partials' indices would not fit in u32.
 */
export function i8SplitPlan(s: I8SplitShape, S: number): { kChunk: number; parts: number } {
  if (!Number.isInteger(S) || S < 1) throw new Error(`qgemm split-K: slice count ${S} must be a positive integer`);
  const p = splitPlan(s.kUnits, s.step, S);
  if (p.parts * s.M * s.N >= 2 ** 32) throw new Error(`qgemm split-K: ${p.parts} slices of ${s.M}x${s.N} overflow u32 indices`);
  return p;
}

/** Cost model units: a wave's K step of a 128×128 tensor-core block on an H200, and what a split adds. */
const WAVE_STEP_US = 1.5;
/** Writing one partial and reading it back: 8 bytes at ~4 TB/s. */
const REDUCE_US_PER_FLOAT = 2e-6;
/** One more dispatch and its barrier. */
const LAUNCH_US = 2;

/**
 * The slice count for a shape, like the fp32 split-K choice (matmul-choice.ts): the GPU holds
 * `resident` workgroups at once (from `parallelThreads`, as there, and at most ~64 accumulators per
 * thread's worth of output blocks), the blocks times the slices run in waves, each wave as long as
 * one slice's K steps, and a split pays for its partials' round trip and one more dispatch. Only
 * counts whose partials fit `workspaceBytes` and no more than `maxSplit` are considered (1: none).
 * The constants are the tensor-core path's; dot4's K steps cost relatively more, so it splits at
 * least as readily as this says.
 */
export function chooseI8SplitK(s: I8SplitShape, workspaceBytes: number, maxSplit = Infinity, parallelThreads = 65536): number {
  const tiles = Math.ceil(s.M / s.BM) * Math.ceil(s.N / s.BN);
  const resident = Math.max(1, Math.min(Math.floor(parallelThreads / s.threads), Math.floor((parallelThreads * 64) / (s.BM * s.BN))));
  let best = 1;
  let bestCost = Infinity;
  for (const S of [1, ...SPLIT_COUNTS]) {
    if (S > maxSplit || (S > 1 && (tiles * S) / 2 >= 2 * resident)) break;
    const { kChunk, parts } = i8SplitPlan(s, S);
    if (parts > 1 && i8SplitWorkspaceBytes(s.M, s.N, parts) > workspaceBytes) continue;
    const waves = Math.ceil((tiles * parts) / resident);
    const reduce = parts > 1 ? REDUCE_US_PER_FLOAT * (parts + 1) * s.M * s.N + LAUNCH_US : 0;
    const cost = waves * (kChunk / s.step) * WAVE_STEP_US + reduce;
    if (cost < bestCost * (1 - 1e-9)) {
      bestCost = cost;
      best = parts;
    }
  }
  return best;
}

// ---- a cap for every qgemmI8 call on a runtime (benchmarks turn split-K off or limit it) --------

const caps = new WeakMap<Runtime, number>();

/** At most `max` slices for the split-K qgemmI8 chooses on this runtime (1: never split; undefined: no cap). */
export function setI8SplitKMax(rt: Runtime, max: number | undefined): void {
  if (max === undefined) caps.delete(rt);
  else if (!Number.isInteger(max) || max < 1) throw new Error(`split-K cap ${max} must be a positive integer`);
  else caps.set(rt, max);
}

export function i8SplitKMax(rt: Runtime): number {
  return caps.get(rt) ?? Infinity;
}

// ---- the second pass ---------------------------------------------------------------------------

/** Checks a split's workspace: large enough, and a buffer of its own (WebGPU forbids one buffer as read and written storage in a dispatch). */
export function checkI8Workspace(label: string, ws: Binding, others: Binding[], M: number, N: number, parts: number): void {
  const need = i8SplitWorkspaceBytes(M, N, parts);
  if (bindingBytes(ws) < need) throw new Error(`${label}: split-K of ${parts} needs a workspace of ${need} bytes, have ${bindingBytes(ws)}`);
  const buf = asSlice(ws).buffer;
  if (others.some((b) => asSlice(b).buffer === buf)) throw new Error(`${label}: the split-K workspace must be a buffer of its own`);
}

/** C (+)= f32(Σ_s partials) · sx[row] · sw[col]: the second pass of a split qgemmI8. */
export function i8SplitReduce(rt: Runtime, a: {
  label: string; workspace: Binding; sx: Binding; sw: Binding; c: Binding; M: number; N: number; parts: number; accumulate?: boolean;
}): Dispatch {
  const u = new Uniforms().u32(a.M).u32(a.N).u32(a.parts).f32(1);
  return rt.kernel({
    label: `${a.label}[split-K reduce ${a.parts}]`,
    code: reduceSrc,
    constants: { ACC: a.accumulate ? 1 : 0 },
    bindings: [a.workspace, a.sx, a.sw, a.c, rt.uniform(`${a.label}.splitk`, u)],
    workgroups: grid2d(rt, Math.ceil((a.M * a.N) / 256)),
  });
}
