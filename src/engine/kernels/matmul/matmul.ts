/**
 * fp32 GEMM dispatches:  C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N]   (src/engine/kernels/matmul/matmul.wgsl).
 *   M = rows of C (tokens B·T in the model), N = columns of C, K = reduction length.
 *   op(A) = A stored row-major [M,K], or [K,M] when transA; op(B) = B stored [K,N], or [N,K] when transB.
 * The model's three forms: Y = X·Wᵀ (transB, W is HF [out,in]), dX = dY·W (NN), dW = dYᵀ·X (transA,
 * accumulate for tied embeddings).
 *
 * Tile shapes: matmul-variants.ts; which one a call runs: matmul-choice.ts; how split-K and
 * stream-K cut the work: matmul-plan.ts; the WGSL text: matmul-wgsl.ts. Transposes and accumulate
 * are overrides (folded at pipeline creation); vec4 vs scalar global access and the
 * bounds-check-free path for shapes the tile divides (FULL_TILES) are chosen per call from the
 * shape (see src/engine/kernels/matmul/io.wgsl).
 *
 * Split-K: a choice named `<variant>_sk<S>` cuts K into S slices run side by side (grid z) into a
 * caller-provided workspace of S·M·N floats, then sums them in order (src/engine/kernels/matmul/splitk.wgsl):
 * what the dW GEMMs need, whose M×N (e.g. 384×384) gives a handful of tiles while K = B·T is huge.
 * Split choices need two dispatches, so only matmulSteps() / buildMatmul() with a workspace use them.
 */
import splitKSrc from './splitk.wgsl?raw';
import splitKSegmentsSrc from './splitk-segments.wgsl?raw';
import streamKFixupSrc from './streamk.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';
import { asSlice, bindingBytes, grid2d, vec4Aligned } from '../launch';
import { pickChoice } from './choice';
import { choiceName, type MatmulChoice, type MatmulShape, splitPlan, type StreamKPlan, streamKPlan, vectorFlags } from './plan';
import { type MatmulVariant, variantFits } from './variants';
import { matmulCode } from './wgsl';

export interface MatmulArgs extends MatmulShape {
  label: string;
  a: Binding;
  b: Binding;
  c: Binding;
  alpha?: number;
  accumulate?: boolean;
  /**
   * Force a choice by name (a variant, or `<variant>_sk<S>` for split-K); default: the autotuned
   * pick for this shape, else the heuristic.
   */
  variant?: string;
  /**
   * Split-K partials (S·M·N floats; a different buffer from c). Without it, or when it is too
   * small for a choice, the GEMM runs in one pass.
   */
  workspace?: Binding;
  /**
   * Default true: transposes, accumulate and BK are compile-time constants. false: read from the
   * uniform block, so one pipeline per (variant, vec4 flags) serves every combination (tests).
   */
  specialize?: boolean;
  /**
   * The low-rank epilogue: C (+)= alpha·op(A)·op(B) + scale·Uᵀ·op(V) in the GEMM's one pass (LoRA's
   * y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ and dX = dY·W + s·(dY·B)·A without a GEMM and a read-add-write of C of
   * their own). U stored [rank, M]; V stored [rank, N], or [N, rank] when transV. One pass only
   * (no split-K or stream-K: their partials are raw sums).
   */
  lowRank?: LowRank;
  /**
   * B holds packed f16 (two a u32 word, cast.ts's layout), widened to f32 at load (io.wgsl b_half):
   * LoRA's thin GEMMs over an f16 saved cell without its fp32 unpack. B's contiguous dimension must be
   * a multiple of 4 and its binding offset of 8 bytes.
   */
  bHalf?: boolean;
  /**
   * A split-K choice leaves its raw partials in the workspace and returns no reduce: the caller sums
   * them with those of other GEMMs in one dispatch (splitKReduceSegments; BuiltMatmul.parts says how
   * many), applying alpha there. One pass and stream-K choices write C as usual.
   */
  deferReduce?: boolean;
}

export interface LowRank {
  u: Binding;
  v: Binding;
  rank: number;
  scale: number;
  transV?: boolean;
}

/** Most rows of U a low-rank epilogue takes (a stacked group's: 3 adapters of rank 64 at most, and some). */
export const MAX_LOW_RANK = 256;

// ---- dispatch building -----------------------------------------------------------------------

function checkArgs(args: MatmulArgs): void {
  const { label, M, N, K } = args;
  // The segments' reduce applies one alpha to raw partials and adds nothing to C.
  if (args.deferReduce && args.accumulate) throw new Error(`${label}: deferReduce leaves raw partials for splitKReduceSegments, which does not accumulate into C`);
  for (const [n, v] of [['M', M], ['N', N], ['K', K]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${label}: ${n} must be an integer ≥ 1, got ${v}`);
  }
  for (const [n, b, bytes] of [['a', args.a, M * K * 4], ['b', args.b, K * N * (args.bHalf ? 2 : 4)], ['c', args.c, M * N * 4]] as const) {
    const have = bindingBytes(b);
    if (have < bytes) throw new Error(`${label}: binding ${n} has ${have} bytes, needs ${bytes}`);
  }
  if (args.bHalf && (!vectorFlags(args).vecB || (asSlice(args.b).offset ?? 0) % 8 !== 0)) {
    throw new Error(`${label}: a packed f16 B needs its contiguous dimension (${args.transB ? 'K' : 'N'}) a multiple of 4 and an 8-byte binding offset`);
  }
  const lr = args.lowRank;
  if (lr) {
    if (!Number.isInteger(lr.rank) || lr.rank < 1 || lr.rank > MAX_LOW_RANK) throw new Error(`${label}: lowRank.rank must be an integer in 1..${MAX_LOW_RANK}, got ${lr.rank}`);
    if (!Number.isFinite(lr.scale)) throw new Error(`${label}: lowRank.scale must be a finite number, got ${lr.scale}`);
    // The epilogue adds scale/alpha to the unscaled sums (matmul.wgsl LOW_RANK).
    if ((args.alpha ?? 1) === 0) throw new Error(`${label}: a low-rank epilogue needs alpha ≠ 0 (it is folded into the sums alpha scales)`);
    if (args.workspace) throw new Error(`${label}: a low-rank epilogue runs in one pass: pass no split-K workspace`);
    for (const [n, b, elems] of [['lowRank.u', lr.u, lr.rank * M], ['lowRank.v', lr.v, lr.rank * N]] as const) {
      const have = bindingBytes(b);
      if (have < elems * 4) throw new Error(`${label}: binding ${n} has ${have} bytes, needs ${elems * 4}`);
      // Read-only here, C is written: WebGPU forbids one buffer as both in a dispatch.
      if (asSlice(b).buffer === asSlice(args.c).buffer) throw new Error(`${label}: ${n} must be a different buffer from c`);
    }
  }
  if (args.workspace) {
    const ws = asSlice(args.workspace).buffer;
    for (const [n, b] of [['a', args.a], ['b', args.b], ['c', args.c]] as const) {
      // WebGPU forbids one buffer as read-only and writable storage in the same dispatch.
      if (asSlice(b).buffer === ws) throw new Error(`${label}: the split-K workspace must be a different buffer from ${n}`);
    }
  }
}

export interface BuiltMatmul {
  /** The GEMM, then for split-K the reduction of its partials: run them in this order. */
  dispatches: Dispatch[];
  /** The per-call uniform blocks and tables (free them with rt.mem.free when the dispatches are dropped). */
  uniforms: GPUBuffer[];
  /** The choice used (`<variant>`, `<variant>_sk<S>` or `<variant>_st<W>`). */
  variant: string;
  /** Split-K slices whose partials the workspace holds (1: none, C written). */
  parts: number;
  /** Whether the shape let the bounds-check-free path run (FULL_TILES). */
  fullTiles: boolean;
}

/** matmulSteps() plus the uniform buffers it allocated (benchmarks and the autotuner free them). */
export function buildMatmul(rt: Runtime, args: MatmulArgs): BuiltMatmul {
  checkArgs(args);
  const { M, N, K } = args;
  const choice = pickChoice(rt, args, args.workspace ? bindingBytes(args.workspace) : 0);
  const v = choice.variant;
  if (!variantFits(v, rt.device.limits)) throw new Error(`${args.label}: variant ${v.name} exceeds this device's limits`);
  if (choice.streamK > 0) {
    const plan = streamKPlan(args, v, choice.streamK);
    if (plan.workspaceFloats > 0 && args.lowRank) throw new Error(`internal: ${args.label}: stream-K picked for a low-rank epilogue`);
    // Without shared tiles every tile is one workgroup's, as in the plain GEMM: that runs.
    if (plan.workspaceFloats > 0) return buildStreamK(rt, args, choice, plan);
  }
  const { kChunk, parts } = splitPlan(K, v.BK, choice.splitK);
  const accumulate = args.accumulate ?? false;
  const alpha = args.alpha ?? 1;
  const name = choiceName(v.name, parts);
  // Split-K partials are raw sums; the reduction applies alpha and accumulate.
  const { gemm, uniform, fullTiles } = gemmDispatch(rt, args, v, {
    name, out: parts > 1 ? args.workspace as Binding : args.c, kChunk, accumulate: parts > 1 ? false : accumulate, alpha: parts > 1 ? 1 : alpha,
    workgroups: [Math.ceil(N / v.BN), Math.ceil(M / v.BM), parts],
  });
  if (parts === 1 || args.deferReduce) return { dispatches: [gemm], uniforms: [uniform], variant: name, fullTiles, parts };
  const ru = rt.uniform(`${args.label}.splitk`, new Uniforms().u32(M * N).u32(parts).f32(alpha).u32(accumulate ? 1 : 0));
  const reduce = rt.kernel({
    label: `${args.label}[matmul split-K reduce ${parts}]`,
    code: splitKSrc,
    entryPoint: 'main',
    bindings: [args.workspace as Binding, args.c, ru],
    workgroups: grid2d(rt, Math.ceil((M * N) / 256)),
  });
  return { dispatches: [gemm, reduce], uniforms: [uniform, ru], variant: name, fullTiles, parts };
}

/**
 * The GEMM dispatch of a choice (buildMatmul checked the arguments): C, split-K's partials (grid z =
 * slices) or, with `streamK`, the stream-K GEMM (its extra bindings and grid).
 */
function gemmDispatch(rt: Runtime, args: MatmulArgs, v: MatmulVariant, o: {
  name: string; out: Binding; kChunk: number; accumulate: boolean; alpha: number; workgroups: [number, number, number];
  streamK?: Binding[];
}): { gemm: Dispatch; uniform: GPUBuffer; fullTiles: boolean } {
  const { M, N, K, transA = false, transB = false } = args;
  // vec4 bindings also need 16-byte offsets (the convention is 256; checked, not assumed).
  const vf = vectorFlags(args);
  // A packed f16 B is always read as vec4 groups (checkArgs).
  const [vecA, vecB, vecC] = [vf.vecA && vec4Aligned(args.a), args.bHalf ? 'half' as const : vf.vecB && vec4Aligned(args.b), vf.vecC && vec4Aligned(o.out)];
  const fullTiles = vecA && !!vecB && vecC && M % v.BM === 0 && N % v.BN === 0 && K % v.BK === 0;
  const specialize = args.specialize ?? true;
  const flags = (transA ? 1 : 0) | (transB ? 2 : 0) | (o.accumulate ? 4 : 0);
  const lr = args.lowRank;
  // The last word is padding, or the low-rank epilogue's scale (the shader bitcasts it).
  const u = new Uniforms().u32(M).u32(N).u32(K).f32(o.alpha).u32(flags).u32(v.BK).u32(o.kChunk);
  const uniform = rt.uniform(args.label, lr ? u.f32(lr.scale) : u.u32(0));
  const lrCode = lr ? { vecU: M % 4 === 0 && vec4Aligned(lr.u), vecV: !lr.transV && N % 4 === 0 && vec4Aligned(lr.v) } : undefined;
  // A dynamic pipeline must not differ by the flags, or it would not be shared.
  const f: Record<string, number> = specialize ? { TRANS_A: +transA, TRANS_B: +transB, ACCUM: +o.accumulate } : {};
  const gemm = rt.kernel({
    label: `${args.label}[matmul ${o.name}${transA ? ' tA' : ''}${transB ? ' tB' : ''}${vecB === 'half' ? ' Bf16' : ''}${lr ? ` +lr${lr.rank}` : ''}]`,
    code: matmulCode(vecA, vecB, vecC, specialize ? v.BK : 0, specialize && v.TN === 16 && !o.accumulate, o.streamK !== undefined, v.lean, lrCode),
    entryPoint: 'main',
    constants: {
      ...f, SPECIALIZE: +specialize, FULL_TILES: +fullTiles, PREFETCH: +v.prefetch, SWIZZLE: o.streamK ? 0 : v.swizzle,
      BM: v.BM, BN: v.BN, BK: v.BK, TM: v.TM, TN: v.TN,
      ...(lr ? { LR_R: lr.rank, LR_TRANS_V: +(lr.transV ?? false) } : {}),
    },
    bindings: [args.a, args.b, o.out, uniform, ...(o.streamK ?? []), ...(lr ? [lr.u, lr.v] : [])],
    workgroups: o.workgroups,
  });
  return { gemm, uniform, fullTiles };
}

/** The two dispatches of a stream-K choice whose plan shares tiles (buildMatmul checked the arguments). */
function buildStreamK(rt: Runtime, args: MatmulArgs, choice: MatmulChoice, plan: StreamKPlan): BuiltMatmul {
  const { M, N, K } = args;
  const v = choice.variant;
  const ws = args.workspace as Binding;
  // The plain GEMM's grid of tiles, cut after the whole waves, then rows enough for the stream-K workgroups.
  const nParts = plan.parts.length / 4;
  const rows = Math.ceil((plan.dpTiles + nParts) / plan.tilesX);
  if (rows > rt.device.limits.maxComputeWorkgroupsPerDimension) {
    throw new Error(`${args.label}: ${choice.name} needs ${rows} rows of workgroups, the device allows ${rt.device.limits.maxComputeWorkgroupsPerDimension}`);
  }
  const accumulate = args.accumulate ?? false;
  const alpha = args.alpha ?? 1;
  const su = rt.uniform(`${args.label}.streamk`, new Uniforms().u32(plan.tilesX).u32(plan.dpTiles).u32(nParts).u32(0));
  const table = rt.upload('workspace', `${args.label}.streamk.parts`, plan.parts);
  // Whole tiles go to C with alpha and accumulate; the parts' raw sums get them in the summing pass.
  const { gemm, uniform, fullTiles } = gemmDispatch(rt, args, v, {
    name: choice.name, out: args.c, kChunk: K, accumulate, alpha, workgroups: [plan.tilesX, rows, 1], streamK: [su, ws, table],
  });
  const fu = rt.uniform(`${args.label}.streamk.fixup`, new Uniforms().u32(M).u32(N).u32(plan.tilesX).u32(plan.dpTiles).u32(plan.ipt)
    .u32(plan.skQ).u32(plan.skR).u32(accumulate ? 1 : 0).f32(alpha).u32(v.BM).u32(v.BN).u32(0));
  const fixup = rt.kernel({
    label: `${args.label}[matmul stream-K fixup ${plan.skTiles} tiles]`,
    code: streamKFixupSrc,
    entryPoint: 'main',
    bindings: [ws, args.c, fu],
    workgroups: [Math.ceil((v.BM * v.BN) / 1024), plan.skTiles, 1],
  });
  return { dispatches: [gemm, fixup], uniforms: [uniform, su, table, fu], variant: choice.name, fullTiles, parts: 1 };
}

/** Split-K partials of one GEMM built with deferReduce, for splitKReduceSegments (offsets and sizes in floats). */
export interface SplitKSegment {
  /** Where the GEMM's C starts in the reduce's `c` binding. */
  c: number;
  /** M·N. */
  size: number;
  /** BuiltMatmul.parts (≥ 2). */
  parts: number;
  /** Where its workspace binding starts in the reduce's `workspace` binding. */
  ws: number;
}

/** Most GEMMs one splitKReduceSegments dispatch sums (its uniform block's 256 bytes). */
export const MAX_SPLIT_K_SEGMENTS = 15;

/**
 * C[seg.c + i] = alpha · Σ_s W[seg.ws + s·seg.size + i] for every segment (GEMMs built with deferReduce,
 * their partials in one workspace buffer, their Cs in one buffer): one dispatch instead of a reduce
 * each, the slices summed in the same order as splitk.wgsl, so each C is the same bits as its own reduce's.
 */
export function splitKReduceSegments(rt: Runtime, o: { label: string; workspace: Binding; c: Binding; segments: readonly SplitKSegment[]; alpha?: number }): { dispatch: Dispatch; uniform: GPUBuffer } {
  const segs = o.segments;
  if (segs.length < 1 || segs.length > MAX_SPLIT_K_SEGMENTS) throw new Error(`${o.label}: 1..${MAX_SPLIT_K_SEGMENTS} split-K segments a reduce, got ${segs.length}`);
  const [wsFloats, cFloats] = [bindingBytes(o.workspace) / 4, bindingBytes(o.c) / 4];
  for (const g of segs) {
    if (![g.c, g.size, g.parts, g.ws].every((x) => Number.isInteger(x) && x >= 0) || g.size < 1 || g.parts < 2) throw new Error(`${o.label}: bad split-K segment ${JSON.stringify(g)}`);
    if (g.c + g.size > cFloats || g.ws + g.parts * g.size > wsFloats) throw new Error(`${o.label}: split-K segment ${JSON.stringify(g)} runs past its bindings (c ${cFloats}, workspace ${wsFloats} floats)`);
  }
  if (asSlice(o.workspace).buffer === asSlice(o.c).buffer) throw new Error(`${o.label}: the split-K workspace must be a different buffer from c`);
  const total = segs.reduce((n, g) => n + g.size, 0);
  const u = new Uniforms().u32(total).u32(segs.length).f32(o.alpha ?? 1).u32(0);
  // The shader's block is the whole 256 bytes: unused segments are zeros.
  for (let j = 0; j < MAX_SPLIT_K_SEGMENTS; j++) {
    const g = segs[j] ?? { c: 0, size: 0, parts: 0, ws: 0 };
    u.u32(g.c).u32(g.size).u32(g.parts).u32(g.ws);
  }
  const uniform = rt.uniform(`${o.label}.segments`, u);
  const dispatch = rt.kernel({
    label: `${o.label}[matmul split-K reduce ×${segs.length}]`,
    code: splitKSegmentsSrc,
    entryPoint: 'main',
    bindings: [o.workspace, o.c, uniform],
    workgroups: grid2d(rt, Math.ceil(total / 256)),
  });
  return { dispatch, uniform };
}

/**
 * C (+)= alpha·op(A)·op(B) as one or two dispatches (two for split-K, which needs `workspace`),
 * built once and re-run with rt.run.
 */
export function matmulSteps(rt: Runtime, args: MatmulArgs): Dispatch[] {
  return buildMatmul(rt, args).dispatches;
}

/** C (+)= alpha·op(A)·op(B) as one Dispatch (never split-K), built once and re-run with rt.run. */
export function matmul(rt: Runtime, args: Omit<MatmulArgs, 'workspace'>): Dispatch {
  const d = buildMatmul(rt, { ...args, workspace: undefined }).dispatches;
  return d[0];
}

export function matmulFlops(s: MatmulShape): number {
  return 2 * s.M * s.N * s.K;
}
