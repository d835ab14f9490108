/**
 * What a run with LoRA adapters allocates and trains (resolved once into RunPlan.lora): the
 * adapters' flat layout (their weights, gradients and AdamW moments, each one flat buffer like the
 * model's), their scale, and the scratch the adapter GEMMs use. The base model is then frozen: no
 * gradient or optimizer buffer of its own, no dW GEMMs (run-plan.ts, backward.ts).
 */
import { type BufferSpec, type ModelDims } from '../model/dims';
import type { ModelConfig } from '../model/config';
import { ALIGN_FLOATS, layoutOf, type ParamLayout } from '../model/params';
import { MAX_SPLIT_K } from '../kernels/matmul/plan';
import { MATMUL_VARIANTS } from '../kernels/matmul/variants';
import { LORA_TARGETS, type LoraAdapter, loraAdapters, loraParamSpecs, loraScale, type LoraSpec, LoraSpecSchema, type LoraTarget } from './spec';

export interface LoraPlan {
  spec: LoraSpec;
  /** alpha / rank. */
  scale: number;
  adapters: LoraAdapter[];
  /** The adapter on a base weight, by the base weight's name. */
  byBase: ReadonlyMap<string, LoraAdapter>;
  /** The adapters' tensors in one flat buffer (lora.weights; lora.grads, lora.m, lora.v alike). */
  layout: ParamLayout;
  /** false: every adapter runs its own GEMMs, none stacked with those sharing its input (tests compare the two). */
  stack?: boolean;
  /**
   * false: the backward recomputes each group's uᵀ = A·x̃ᵀ (a GEMM per group and layer) instead of
   * reading the forward's, saved per layer (N·r floats per adapter; tests compare the two).
   */
  saveU?: boolean;
  /** false: uᵀ and vᵀ run in one pass, never split over K (no lora.ws; benches compare the two). */
  splitThin?: boolean;
  /**
   * false: every split thin GEMM sums its own partials (a reduce dispatch each). Default: a layer's dA and
   * dB GEMMs leave theirs in lora.gws and one reduce after the layer's last adapter sums them all, and a
   * group's vᵀ GEMMs share one reduce before its dA (the same sums in the same order: tests compare the two).
   */
  batchReduce?: boolean;
  /**
   * false: y's s·u·Bᵀ and dX's s·v·A run as GEMMs of their own after the base GEMM, never in its
   * low-rank epilogue (benches compare the two).
   */
  epilogue?: boolean;
  /**
   * Pins which f16 base GEMMs take the epilogue too: forward (y's term), dx (dX's), both, none ([]).
   * Default: those whose tensor-core layout multiplies the term on the tensor cores on this device
   * (LinearGemms.lowRankFits); the per-element lowRank() of the others (SIMT, alpha ≠ 1) sums r products
   * from global memory and gives up the direct stores, which cost more than fp32 GEMMs of their own.
   */
  f16Epilogue?: readonly ('forward' | 'dx')[];
}

/** Targets whose linears read one input (the attention's h1, o, the MLP's h2, act): adapters stacked into one GEMM (gemms.ts). */
export const LORA_SHARED_INPUT: readonly (readonly LoraTarget[])[] = [['q', 'k', 'v'], ['o'], ['gate', 'up'], ['down']];

export function resolveLoraPlan(cfg: ModelConfig, spec: LoraSpec): LoraPlan {
  const s = LoraSpecSchema.parse(spec);
  const adapters = loraAdapters(cfg, s);
  // Per layer and shared input, the A's back to back (one [g·r, in] matrix where r·in fills whole
  // 256-byte blocks), then the B's; a layout order only (files and checkpoints go by name).
  const specs = new Map(loraParamSpecs(cfg, s).map((p) => [p.name, p]));
  const ordered = LORA_SHARED_INPUT.flatMap((ts) => [0, 1].map((ab) => [ts, ab] as const));
  const order = [...new Set(adapters.map((a) => a.layer))].flatMap((l) => ordered.flatMap(([ts, ab]) =>
    adapters.filter((a) => a.layer === l && ts.includes(a.target)).map((a) => specs.get(ab ? a.b : a.a)!)));
  return { spec: s, scale: loraScale(s), adapters, byBase: new Map(adapters.map((a) => [a.base, a])), layout: layoutOf(order) };
}

/**
 * The adapters' low-rank products, transposed ([r, N] per adapter, so a group's stack [g·r, N] is
 * one matrix and each member's rows a slice): (x·Aᵀ)ᵀ in lora.u (training: every layer's, one slot
 * per target, saved from the forward for the backward; else a group at a time), and (dY·B)ᵀ in
 * lora.t, one slot per target, kept from the dW place to the dX place. Slots in LORA_TARGETS order,
 * a group's adjacent; `slot`: the slot's floats, 256-byte aligned.
 */
export function loraRankSlots(p: LoraPlan, d: ModelDims): { slot: number; index: ReadonlyMap<LoraTarget, number> } {
  const index = new Map(LORA_TARGETS.filter((t) => p.spec.targets.includes(t)).map((t, i) => [t, i]));
  return { slot: Math.ceil((d.N * p.spec.rank) / ALIGN_FLOATS) * ALIGN_FLOATS, index };
}

/** Whether adapters sharing an input may run as one GEMM: not with dropout (each adapter drops its own mask of x). */
export const loraStacks = (p: LoraPlan): boolean => p.stack !== false && p.spec.dropout === 0;

/** Whether a training step keeps every layer's uᵀ from the forward for the backward (lora.u per layer and target). */
export const loraSavesU = (p: LoraPlan, training: boolean): boolean => training && p.saveU !== false;

/** The most adapters one GEMM serves (lora.u holds that many [r, N] products when not saved). */
export const loraMaxGroup = (p: LoraPlan): number =>
  (loraStacks(p) ? Math.max(...LORA_SHARED_INPUT.map((ts) => ts.filter((t) => p.spec.targets.includes(t)).length)) : 1);

/**
 * Most K slices a thin adapter GEMM over a layer's width is cut into (uᵀ [g·r, N] with K = in, vᵀ
 * [r, N] with K = out): one pass leaves those GEMMs a few dozen workgroups each looping over K alone
 * (the fp32 heuristic, matmul/choice.ts, prices 3–6× the time of the split); the heuristic picks the count.
 */
export const LORA_SPLIT_SLICES = 8;

/** lora.ws: LORA_SPLIT_SLICES partials of the largest uᵀ (a group's) or vᵀ. */
export const loraSplitBytes = (p: LoraPlan, d: ModelDims): number => LORA_SPLIT_SLICES * loraMaxGroup(p) * p.spec.rank * d.N * 4;

/** A layer's adapter tensors in the flat layout: [start, start + span) floats (the layout keeps a layer's together). */
export function loraLayerRange(p: LoraPlan, layer: number): { start: number; span: number } {
  const ts = p.adapters.filter((a) => a.layer === layer).flatMap((a) => [a.a, a.b]).map((n) => p.layout.byName.get(n)!);
  const start = Math.min(...ts.map((t) => t.offset));
  return { start, span: Math.max(...ts.map((t) => t.offset + t.size)) - start };
}

/**
 * Whether a training step's dA/dB split-K partials go to lora.gws, summed once a layer (LoraPlan.batchReduce).
 * Default: where lora.gws costs no more than the adapters' own training state (weights, grads, AdamW's m and v);
 * in a small model (few layers: the workspace is a layer's span times up to MAX_SPLIT_K slices) it would make
 * LoRA's memory larger than full fine-tuning's, and each GEMM keeps its own reduce.
 */
export const loraBatchesReduce = (p: LoraPlan, d: ModelDims): boolean =>
  p.batchReduce ?? loraGradSplitBytes(p, d) <= 4 * p.layout.totalFloats * 4;

/** Most split-K slices a dA/dB GEMM (K = the N tokens) can have: MAX_SPLIT_K, or as many k tiles of the smallest BK as K has. */
export const loraGradSlices = (d: ModelDims): number => Math.min(MAX_SPLIT_K, Math.ceil(d.N / Math.min(...MATMUL_VARIANTS.map((v) => v.BK))));

/**
 * lora.gws: room for loraGradSlices partials of every gradient of the widest layer (each tensor's at
 * that many times its offset in the layer), so the dA/dB GEMMs pick their splits as with the dW scratch.
 */
export const loraGradSplitBytes = (p: LoraPlan, d: ModelDims): number =>
  loraGradSlices(d) * Math.max(...[...new Set(p.adapters.map((a) => a.layer))].map((l) => loraLayerRange(p, l).span)) * 4;

export function loraBuffers(p: LoraPlan, d: ModelDims, training: boolean): BufferSpec[] {
  const P = p.layout.totalFloats * 4;
  const r = p.spec.rank;
  const out: BufferSpec[] = [{ key: 'lora.weights', category: 'weights', bytes: P }];
  // Saved: +N·r floats per adapter and layer (the backward's recompute of it was a GEMM per group and layer).
  if (loraSavesU(p, training)) {
    out.push({ key: 'lora.u', category: 'activations', bytes: d.L * loraRankSlots(p, d).slot * p.spec.targets.length * 4 });
  } else out.push({ key: 'lora.u', category: 'workspace', bytes: d.N * r * 4 * loraMaxGroup(p) });
  // Split-K partials of the thin GEMMs whose K is a layer width (uᵀ, vᵀ: a few tiles each, the K loop serial).
  if (p.splitThin !== false) out.push({ key: 'lora.ws', category: 'workspace', bytes: loraSplitBytes(p, d) });
  // The dropped copy of an adapter's input (recomputed in backward from the same seed; backward also forms dX's masked term here).
  if (p.spec.dropout > 0) out.push({ key: 'lora.xd', category: 'workspace', bytes: d.N * Math.max(...p.adapters.map((a) => a.in)) * 4 });
  if (!training) return out;
  out.push({ key: 'lora.grads', category: 'grads', bytes: P });
  // A layer's dA/dB split-K partials, kept until one reduce after its last adapter sums them (the dW scratch is reused in between).
  if (loraBatchesReduce(p, d)) out.push({ key: 'lora.gws', category: 'workspace', bytes: loraGradSplitBytes(p, d) });
  out.push({ key: 'lora.m', category: 'optimizer', bytes: P }, { key: 'lora.v', category: 'optimizer', bytes: P });
  out.push({ key: 'lora.t', category: 'workspace', bytes: loraRankSlots(p, d).slot * p.spec.targets.length * 4 });
  return out;
}
