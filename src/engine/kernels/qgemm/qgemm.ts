/**
 * Quantized GEMMs, all C[M,N] = X[M,K] · Wᵀ with the model's layout (X row-major tokens, W the HF
 * [N, K] = [out, in] weight):
 *   (a) qgemmI8       — INT8 X (per-row scales) × INT8 W (per-output-channel scales), dot4I8Packed,
 *                       dequantized in the epilogue (src/engine/kernels/qgemm/qgemm.wgsl), or on tensor cores where
 *                       enableI8TensorCores turned them on (./qgemm-tc.ts); quantizeRowsI8 makes the
 *                       packed X rows with the shared absmax quantizer (./quantize.ts);
 *                       qgemmI8Steps also splits K where that fills the GPU better (./qgemm-splitk.ts).
 *   (b) qgemmWeightOnly — fp32 X × W group-quantized along K (INT8 / INT4 / NF4 / FP8), dequantized while
 *                       staged (src/engine/kernels/qgemm/f32.wgsl + qgemm-io.wgsl `w_q`).
 *   (c) qgemmQuantOut — fp32 GEMM writing C INT4/INT8 group-quantized along N (`out_q`).
 * (b) and (c) are one kernel with two operand sections, so qgemmF32 also composes them.
 *
 * Shape requirements (checked here; callers pad the K axis with zeros, which changes no product):
 *   (a) K % 4 == 0 (packed int8 rows); K ≤ I8_MAX_K = 131 071 (exact i32 accumulation).
 *   (b) K % 4 == 0 (vec4 X rows), K % CPW == 0 (CPW = 4, or 8 for INT4 / NF4), G % CPW == 0.
 *       W groups are per row: scales [N, ceil(K/G)]; equals quantizeRef's flat 'group' layout when
 *       G divides K (quantizeWeightsRef in qgemm.ref.ts builds either).
 *   (c) K % 4 == 0, N % (32/bits) == 0 (rows of whole words), output group GQ ∈ {32..256}, a
 *       multiple of TN; scales [M, ceil(N/GQ)]. M and N are otherwise free everywhere.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import f32Src from './f32.wgsl?raw';
import ioSrc from './io.wgsl?raw';
import i8Src from './qgemm.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';
import { BITS, FORMAT_ID, type QuantFormat } from '../../quant/formats';
import { bindingBytes } from '../launch';
import {
  checkI8SumFits, checkI8Workspace, chooseI8SplitK, type I8Slices, type I8SplitShape, i8SplitKMax, i8SplitPlan, i8SplitReduce,
} from './splitk';
import { type I8TcChoice, i8TcChoiceFor, i8TcShapeOk, i8TcSplitShape, i8TensorCoreSpec, qgemmI8Tc } from './tc';
import { buildQuantize, type QuantizeKernel } from '../quantize/quantize';
import { wgslIf, wgslSection } from '../wgsl';

export interface GemmTiles {
  BM?: number;
  BN?: number;
  /** K depth per step: packed words for qgemmI8, elements (multiple of 8) for the fp32 kernels. */
  BK?: number;
  TM?: number;
  TN?: number;
}

interface Tiles {
  BM: number;
  BN: number;
  BK: number;
  TM: number;
  TN: number;
}

function tiles(rt: Runtime, label: string, t: Tiles): Tiles {
  const { BM, BN, TM, TN, BK } = t;
  if (![4, 8].includes(TM) || ![4, 8].includes(TN)) throw new Error(`${label}: TM, TN must be 4 or 8`);
  if (BM % TM || BN % TN || BM % 4 || BN % 4 || BK < 1) throw new Error(`${label}: bad tiles ${JSON.stringify(t)}`);
  const wg = (BM / TM) * (BN / TN);
  if (wg > rt.device.limits.maxComputeInvocationsPerWorkgroup) {
    throw new Error(`${label}: ${wg} threads per workgroup exceed the device limit`);
  }
  return t;
}

function checkPositive(label: string, dims: Record<string, number>): void {
  for (const [k, v] of Object.entries(dims)) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${label}: ${k}=${v} must be a positive integer`);
  }
}

/** The kernel qgemmI8 runs for a reduction length K, with or without the tensor-core path enabled (the page predicts with it). */
export function i8GemmPath(tensorCores: boolean, K: number): 'int8-dot4' | 'int8-tensor-core' {
  return tensorCores && i8TcShapeOk(K) ? 'int8-tensor-core' : 'int8-dot4';
}

/** The kernel qgemmI8 runs for a reduction length K on this runtime (without explicit tiles). */
export function qgemmI8Path(rt: Runtime, K: number): 'int8-dot4' | 'int8-tensor-core' {
  return i8GemmPath(!!i8TensorCoreSpec(rt), K);
}

export interface QgemmI8Args {
  label: string; xq: Binding; sx: Binding; wq: Binding; sw: Binding; c: Binding;
  M: number; N: number; K: number;
  /** dot4 tiles; given, the call runs dot4 even where tensor cores are enabled. */
  tiles?: GemmTiles;
  accumulate?: boolean;
}

/**
 * The kernel a call runs: the shape's tensor-core spec where the shape allows (i8TcChoiceFor: tuned,
 * measured or the enabled one; `choice` forces one, as the tuner times them), else dot4 with its tiles.
 */
function i8Kernel(rt: Runtime, a: QgemmI8Args & { choice?: I8TcChoice }): I8TcChoice | { t: Tiles } {
  checkPositive(a.label, { M: a.M, N: a.N, K: a.K });
  if (a.K % 4) throw new Error(`${a.label}: K=${a.K} must be a multiple of 4 (packed int8 rows)`);
  checkI8SumFits(a.label, a.K);
  // Tensor cores where enableI8TensorCores found them exact on this device (same bits as dot4).
  const tc = a.tiles ? undefined : (a.choice ?? i8TcChoiceFor(rt, a.M, a.N, a.K));
  if (tc && i8TcShapeOk(a.K)) return tc;
  return { t: tiles(rt, a.label, { BM: 64, BN: 64, BK: 8, TM: 4, TN: 4, ...a.tiles }) };
}

/** The dot4 kernel, or with `split` one K slice per workgroup z into its workspace. */
function i8Dot4(rt: Runtime, a: QgemmI8Args, t: Tiles, split?: I8Slices): Dispatch {
  const u = new Uniforms().u32(a.M).u32(a.N).u32(a.K / 4).u32(split ? split.kChunk : a.K / 4).f32(1);
  const ub = rt.uniform(a.label, u);
  const constants: Record<string, number> = { BM: t.BM, BN: t.BN, BKW: t.BK, TM: t.TM, TN: t.TN };
  if (!split) constants.ACC = a.accumulate ? 1 : 0;
  return rt.kernel({
    label: split ? `${a.label}[split-K ${split.parts}]` : a.label,
    code: wgslIf(i8Src, { PART: !!split }),
    constants,
    bindings: split ? [a.xq, a.wq, split.workspace, ub] : [a.xq, a.sx, a.wq, a.sw, a.c, ub],
    workgroups: [Math.ceil(a.N / t.BN), Math.ceil(a.M / t.BM), split ? split.parts : 1],
  });
}

/**
 * (a) C (+)= diag(sx)·(QX·QWᵀ)·diag(sw). xq [M, K/4] u32, sx [M], wq [N, K/4] u32, sw [N], c [M, N] f32;
 * `accumulate` adds the product to C (the same f32 product, then one addition). One pass over K.
 */
export function qgemmI8(rt: Runtime, a: QgemmI8Args): Dispatch {
  const k = i8Kernel(rt, a);
  return 'spec' in k ? qgemmI8Tc(rt, k.spec, a) : i8Dot4(rt, a, k.t);
}

/** What split-K knows of the kernel a call runs (its block, threads, K units and step). */
function splitShape(a: QgemmI8Args, k: ReturnType<typeof i8Kernel>): I8SplitShape {
  if ('spec' in k) return i8TcSplitShape(k.spec, a.M, a.N, a.K);
  return { M: a.M, N: a.N, BM: k.t.BM, BN: k.t.BN, threads: (k.t.BM / k.t.TM) * (k.t.BN / k.t.TN), kUnits: a.K / 4, step: k.t.BK };
}

type SplitArgs = QgemmI8Args & { workspace?: Binding; splitK?: number; choice?: I8TcChoice };

function splitCount(rt: Runtime, a: SplitArgs, k: ReturnType<typeof i8Kernel>): number {
  const s = splitShape(a, k);
  if (a.splitK !== undefined) return i8SplitPlan(s, a.splitK).parts;
  // Tensor cores split only where the choice's split was checked exact here (not a shape's measured layout).
  if (!a.workspace || ('spec' in k && !k.split)) return 1;
  return chooseI8SplitK(s, bindingBytes(a.workspace), i8SplitKMax(rt));
}

/**
 * The slices qgemmI8Steps runs for a call: `splitK` when forced, else chooseI8SplitK's pick for
 * the workspace (none: 1) under the runtime's cap (setI8SplitKMax). Tensor cores split only where
 * the shape's spec had its split checked exact here (I8TcChoice.split); a forced count is taken as asked.
 */
export function qgemmI8SplitK(rt: Runtime, a: SplitArgs): number {
  return splitCount(rt, a, i8Kernel(rt, a));
}

/**
 * qgemmI8 as one or two dispatches: split over K (the partials into `workspace`, [S, M, N] i32,
 * then their exact sum dequantized into C) where qgemmI8SplitK says so, else the one pass. The
 * result is the same bits either way. `splitK` forces the slice count (1: one pass).
 */
export function qgemmI8Steps(rt: Runtime, a: SplitArgs): { dispatches: Dispatch[]; splitK: number } {
  const k = i8Kernel(rt, a);
  const parts = splitCount(rt, a, k);
  if (parts === 1) return { dispatches: ['spec' in k ? qgemmI8Tc(rt, k.spec, a) : i8Dot4(rt, a, k.t)], splitK: 1 };
  const workspace = a.workspace;
  if (!workspace) throw new Error(`${a.label}: split-K of ${parts} needs a workspace`);
  checkI8Workspace(a.label, workspace, [a.xq, a.sx, a.wq, a.sw, a.c], a.M, a.N, parts);
  const split: I8Slices = { ...i8SplitPlan(splitShape(a, k), parts), workspace };
  const gemm = 'spec' in k ? qgemmI8Tc(rt, k.spec, a, split) : i8Dot4(rt, a, k.t, split);
  return { dispatches: [gemm, i8SplitReduce(rt, { ...a, workspace, parts })], splitK: parts };
}

/**
 * Per-row (per-token) INT8 quantization of x [M, K] into the operand layout of qgemmI8: words
 * [M, K/4] (K % 4 == 0 keeps rows word-aligned) and scales [M]. This is the shared absmax
 * quantizer (./quantize.ts, quantizeRef 'row' semantics), whose flat packing is exactly that layout.
 */
export function quantizeRowsI8(rt: Runtime, a: { x: GPUBuffer; M: number; K: number; words?: GPUBuffer; scales?: GPUBuffer }): QuantizeKernel {
  checkPositive('quantizeRowsI8', { M: a.M, K: a.K });
  if (a.K % 4) throw new Error(`quantizeRowsI8: K=${a.K} must be a multiple of 4`);
  return buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: a.K }, n: a.M * a.K }, a.x,
    { words: a.words, scales: a.scales, category: 'activations' });
}

export type WeightOperand =
  | { kind: 'f32'; w: Binding }
  /** codes [N, K/CPW] u32 packed along K, scales [N, ceil(K/G)] f32. */
  | { kind: 'q'; codes: Binding; scales: Binding; format: QuantFormat; G: number };

export type OutputOperand =
  | { kind: 'f32'; c: Binding }
  /** codes [M, N/(32/bits)] u32, scales [M, ceil(N/G)] f32. */
  | { kind: 'q'; codes: Binding; scales: Binding; bits: 4 | 8; G: number };

/** Composed WGSL for the fp32-activation kernel; binding order X, W (+WS), C (+CS), P. */
export function qgemmF32Shader(w: WeightOperand['kind'], out: OutputOperand['kind']): string {
  const order = ['X', 'W', ...(w === 'q' ? ['WS'] : []), 'C', ...(out === 'q' ? ['CS'] : []), 'P'];
  const code = [codecSrc, f32Src, wgslSection(ioSrc, `w_${w}`), wgslSection(ioSrc, `out_${out}`)].join('\n');
  return code.replace(/@binding\(@(\w+)\)/g, (_, name: string) => {
    const i = order.indexOf(name);
    if (i < 0) throw new Error(`qgemm: unknown binding placeholder ${name}`);
    return `@binding(${i})`;
  });
}

/** fp32 X [M, K] × (fp32 | quantized) W [N, K]ᵀ → (fp32 | quantized) C [M, N]. */
export function qgemmF32(rt: Runtime, a: {
  label: string; x: Binding; w: WeightOperand; out: OutputOperand; M: number; N: number; K: number; tiles?: GemmTiles;
  /** fp32 C only: add the product to C. */
  accumulate?: boolean;
}): Dispatch {
  const { label, M, N, K } = a;
  checkPositive(label, { M, N, K });
  if (K % 4) throw new Error(`${label}: K=${K} must be a multiple of 4 (vec4 rows of X)`);
  const quantOut = a.out.kind === 'q';
  const defaults: Tiles = quantOut && a.out.kind === 'q'
    ? { BM: 64, BN: Math.max(64, a.out.G), BK: 16, TM: 4, TN: 8 }
    : { BM: 64, BN: 64, BK: 16, TM: 4, TN: 4 };
  if (quantOut && a.out.kind === 'q' && a.out.G > 64) defaults.BM = Math.max(16, (64 * 64) / a.out.G);
  const t = tiles(rt, label, { ...defaults, ...a.tiles });
  if (t.BK % 8) throw new Error(`${label}: BK=${t.BK} must be a multiple of 8`);
  const constants: Record<string, number> = { BM: t.BM, BN: t.BN, BK: t.BK, TM: t.TM, TN: t.TN };
  const bindings: Binding[] = [a.x];
  let KG = 0;
  if (a.w.kind === 'f32') {
    bindings.push(a.w.w);
  } else {
    const cpw = 32 / BITS[a.w.format];
    const G = a.w.G;
    if (K % cpw) throw new Error(`${label}: K=${K} must be a multiple of ${cpw} for ${a.w.format} weights`);
    if (!Number.isInteger(G) || G < cpw || G % cpw) throw new Error(`${label}: weight group ${G} must be a multiple of ${cpw}`);
    KG = Math.ceil(K / G);
    constants.FMT = FORMAT_ID[a.w.format];
    constants.GW = G;
    bindings.push(a.w.codes, a.w.scales);
  }
  let NG = 0;
  if (a.out.kind === 'f32') {
    bindings.push(a.out.c);
    if (a.accumulate) constants.ACC = 1;
  } else {
    if (a.accumulate) throw new Error(`${label}: accumulate needs an fp32 output`);
    const { bits, G } = a.out;
    const cpw = 32 / bits;
    if (N % cpw) throw new Error(`${label}: N=${N} must be a multiple of ${cpw} for ${bits}-bit output rows`);
    if (!Number.isInteger(G) || G % t.TN || t.BN % G) {
      throw new Error(`${label}: output group ${G} must be a multiple of TN=${t.TN} and divide BN=${t.BN}`);
    }
    if (t.TN % cpw) throw new Error(`${label}: TN=${t.TN} must hold whole ${bits}-bit words`);
    NG = Math.ceil(N / G);
    constants.OBITS = bits;
    constants.GQ = G;
    bindings.push(a.out.codes, a.out.scales);
  }
  const u = new Uniforms().u32(M).u32(N).u32(K).u32(KG).u32(NG).u32(0).u32(0).u32(0);
  bindings.push(rt.uniform(label, u));
  return rt.kernel({
    label,
    code: qgemmF32Shader(a.w.kind, a.out.kind),
    constants,
    bindings,
    workgroups: [Math.ceil(N / t.BN), Math.ceil(M / t.BM)],
  });
}

/** (b) fp32 X × group-quantized W → fp32 C (`accumulate`: C += the product). */
export function qgemmWeightOnly(rt: Runtime, a: {
  label: string; x: Binding; wq: Binding; ws: Binding; c: Binding; format: QuantFormat; G: number;
  M: number; N: number; K: number; tiles?: GemmTiles; accumulate?: boolean;
}): Dispatch {
  return qgemmF32(rt, {
    label: a.label, x: a.x, M: a.M, N: a.N, K: a.K, tiles: a.tiles, accumulate: a.accumulate,
    w: { kind: 'q', codes: a.wq, scales: a.ws, format: a.format, G: a.G },
    out: { kind: 'f32', c: a.c },
  });
}

/** (c) fp32 X × fp32 W → C quantized INT4/INT8 in groups of G along each output row. */
export function qgemmQuantOut(rt: Runtime, a: {
  label: string; x: Binding; w: Binding; cq: Binding; cs: Binding; bits: 4 | 8; G: number;
  M: number; N: number; K: number; tiles?: GemmTiles;
}): Dispatch {
  return qgemmF32(rt, {
    label: a.label, x: a.x, M: a.M, N: a.N, K: a.K, tiles: a.tiles,
    w: { kind: 'f32', w: a.w },
    out: { kind: 'q', codes: a.cq, scales: a.cs, bits: a.bits, G: a.G },
  });
}
