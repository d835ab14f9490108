/**
 * The storage vocabulary of the training step's plan (run-plan.ts resolves a scheme with it): which
 * tensors are saved for backward and at what size, how a quantized tensor is laid out (packed codes
 * + fp32 scales), which live copies alias backward scratch, and a model's build options.
 *
 * Shapes: B batch, T context, N = B·T tokens, C hidden, F intermediate, nH/nKV query/KV heads,
 * D head dim, V vocab, L layers.
 */
import type { DqPath } from '../kernels/attention/ds';
import type { F16AttnSpec } from '../kernels/attention/f16/code';
import type { F16AttnBwdSpecs } from '../kernels/attention/f16/layouts';
import { dequantizeRowsAligned } from '../kernels/quantize/quantize';
import { BITS, type QuantFormat } from '../quant/formats';
import { type CodeBits, wordsFor } from '../quant/pack';
import { type Granularity, numScales } from '../quant/quantizer';
import { bf16Words } from '../kernels/bf16/bf16.ref';
import { type HalfFormat, isFp32, isHalfFormat, type QuantSpec, type SavedSpec, savedSpec, type SavedKind, type Scheme } from '../scheme/scheme';
import type { ModelDims } from './dims';
import type { ParamLayout } from './params';

export { type BufferSpec, type ModelDims, modelDims } from './dims';

/**
 * The fewest tokens (B·T) for which the forward linears transpose their weight and run NN (llama.ts,
 * linear()). The transpose costs the same whatever the tokens; what the NN layout saves grows with
 * them: measured, it pays from about a thousand tokens, and 2048 keeps a margin. Below it (a B = 1 sampler) the GEMM reads W as stored.
 */
export const LINEAR_NN_MIN_ROWS = 2048;

/** Whether a model of `tokens` (B·T) rows runs its forward linears NN on a transposed weight. */
export function linearsTransposed(tokens: number, minRows = LINEAR_NN_MIN_ROWS): boolean {
  return tokens >= minRows;
}

/** Choices the plan makes itself, which tests force (the planner and the model take the same ones). */
export interface PlanOverrides {
  /** Tests: force the SwiGLU backward's block rows (see swigluBlockRows). */
  swigluBlockRows?: number;
  /** Tests: force the token rows of logits that exist at once (plan/logits.ts logitsChunkRows). */
  logitsChunkRows?: number;
  /** Tests: the fewest tokens (B·T) for which the forward linears run NN on a transposed weight (LINEAR_NN_MIN_ROWS). */
  linearNnMinRows?: number;
  /** Tests: false runs gate_proj's and up_proj's INT8 dX as two GEMMs even where one over K = 2F applies (gateUpDxFused). */
  fuseGateUpDx?: boolean;
  /** Tests: false quantizes a saved tensor into its INT8-per-row storage and into i8.a separately even where one set of codes serves both (sharesInputCodes). */
  shareCodes?: boolean;
  /** Tests: false stores f16 saved activations packed beside the f16 operand copies (f16.a, f16.x, f16.qkv) even where the cell can be the copy (f16Cells). */
  shareF16?: boolean;
  /** Tests: false keeps the SwiGLU's packs and its blocked backward's unpacks even where it can read and write gate's and up's f16 storage itself (f16SwigluStored, f16SwigluBwdStored). */
  swigluHalf?: boolean;
  /** Tests: false has RMSNorm and RoPE write their fp32 outputs too where nothing reads them (f16OnlyOutputs). */
  f16Only?: boolean;
  /** Tests: whether the f16 workspace is lean (RunPlan.f16Lean; default: f16Lean, model/f16-operands.ts: some activation stored below 16 bits). */
  f16Lean?: boolean;
}

export interface PlanOptions extends PlanOverrides {
  /** false: forward only (evaluation, sampling) — no grads, optimizer state or backward workspace. */
  training?: boolean;
  scheme?: Scheme;
  /** false: the weights belong to another model (a B=1 sampler beside the trainer). */
  ownWeights?: boolean;
  /** The model is rank `tpRank` of a real tensor-parallel group (a shard config; TpPeer's buffers instead of TpSim's). */
  tpRank?: number;
}

/** What building a model takes beside its plan (run-plan.ts): the GPU objects and kernel choices a plan does not price. */
export interface ModelBuildOptions {
  /** Bind another model's weights instead of allocating them (the plan was resolved with ownWeights: false). */
  sharedWeights?: GPUBuffer;
  /** Tests, benchmarks: force the attention backward's dq path (attentionDqPlan; default: stored dS where dF1 holds it). */
  attnDqPath?: DqPath;
  /**
   * Tests: the f16 attention's specs instead of those verified on the device (enableF16Attention), and
   * `emulate`: their twins over f32 (an f16Twin plan's attention on a device without subgroup matrices).
   */
  f16Attention?: { forward: F16AttnSpec; backward: F16AttnBwdSpecs; emulate: boolean };
}

/** Saved-for-backward tensors of one layer (the schemes re-price these). */
export const LAYER_SAVED = ['xIn', 'rstd1', 'h1', 'q', 'k', 'v', 'o', 'lse', 'xMid', 'rstd2', 'h2', 'gate', 'up', 'act'] as const;
/** Saved tensors after the last layer: the final norm's input and output (the lm_head input). */
export const FINAL_SAVED = ['xFinal', 'hF'] as const;
export type LayerSavedKey = (typeof LAYER_SAVED)[number] | (typeof FINAL_SAVED)[number];

/**
 * Activation checkpointing (RunPlan.checkpoint): each layer keeps only its input (xIn) of its own;
 * its other saved tensors live in one shared set (`ckpt.<key>`) that the forward overwrites layer
 * by layer and the backward refills by re-running layer l's forward before layer l's backward.
 */
export const CHECKPOINT_KEPT: readonly LayerSavedKey[] = ['xIn'];

/** The buffer of layer l's fp32 saved tensor `key` (l = L: the final norm's): its own, or the shared set's under checkpointing. */
export function savedKey(l: number, key: LayerSavedKey, L: number, checkpoint: boolean): string {
  return checkpoint && l < L && !CHECKPOINT_KEPT.includes(key) ? `ckpt.${key}` : `L${l}.${key}`;
}

/**
 * Which scheme column prices each saved tensor. `o` is both the attention output (its backward
 * needs it) and the O-proj input; it is stored once, at the `attn_out` setting. rstd and lse are
 * per-row statistics and stay fp32.
 */
export const SAVED_KIND_OF: Partial<Record<LayerSavedKey, SavedKind>> = {
  xIn: 'norm_input', h1: 'qkv_input', q: 'attn_qkv', k: 'attn_qkv', v: 'attn_qkv', o: 'attn_out',
  xMid: 'norm_input', h2: 'mlp_input', gate: 'swiglu', up: 'swiglu', act: 'down_input',
  xFinal: 'norm_input', hF: 'head_input',
};

/** Quantized storage of one saved tensor or gradient: packed codes + fp32 scales (a `Quantized` on the GPU). */
export interface SavedStorage {
  format: QuantFormat;
  granularity: Granularity;
  n: number;
  words: number;
  scales: number;
}

/** A saved activation kept as a 16-bit float, bf16 or f16: two per u32 word (kernels/bf16, kernels/f16), no scales. */
export interface HalfStorage {
  format: HalfFormat;
  n: number;
  words: number;
  scales: 0;
}

/** Storage of one saved activation: quantized codes + scales, or bf16 / f16. */
export type ActivationStorage = SavedStorage | HalfStorage;

export const isHalf = (st: ActivationStorage | undefined): st is HalfStorage => !!st && isHalfFormat(st.format);

/**
 * Whether rows [r0, r0 + rows) of a stored [N, width] tensor start at 256-byte-aligned offsets of its
 * words (and scales) for every r0 that is a multiple of `rows`: what a row-block unpack binds.
 */
export function storedRowsAligned(st: ActivationStorage, width: number, rows: number): boolean {
  return isHalf(st) ? (rows * width * 2) % 256 === 0 : dequantizeRowsAligned(st, width, rows);
}

export function savedStorage(spec: QuantSpec, n: number, rowLength: number): SavedStorage | null {
  if (spec.format === 'fp32') return null;
  const granularity: Granularity =
    spec.granularity === 'row' ? { kind: 'row', rowLength }
      : spec.granularity === 'column' ? { kind: 'column', rowLength }
        : spec.granularity === 'tensor' ? { kind: 'tensor' }
          : { kind: 'group', size: spec.group };
  const format = spec.format as QuantFormat;
  return { format, granularity, n, words: wordsFor(n, BITS[format] as CodeBits), scales: numScales(granularity, n) };
}

/** A saved activation's storage under its cell (null = fp32). */
export function activationStorage(spec: SavedSpec, n: number, rowLength: number): ActivationStorage | null {
  // bf16 and f16 both take two values a word (bf16Words).
  if (isHalfFormat(spec.format)) return { format: spec.format, n, words: bf16Words(n), scales: 0 };
  return savedStorage({ ...spec, format: spec.format }, n, rowLength);
}

/** Per-tensor storage of the gradients under a scheme's grads.storage (null = one fp32 flat buffer). */
export function gradStorage(layout: ParamLayout, scheme: Scheme | undefined): Map<string, SavedStorage> | null {
  const spec = scheme?.grads.storage;
  if (!spec || isFp32(spec)) return null;
  return new Map(layout.views.map((v) => [v.name, savedStorage(spec, v.size, v.shape[v.shape.length - 1])!]));
}

export const LINEAR = ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'mlp.gate_proj', 'mlp.up_proj', 'mlp.down_proj'];

/**
 * Live copies that reuse a backward scratch buffer of the same size instead of their own: in the
 * forward pass these buffers are free, and the backward order (buildBackward) reloads each live copy
 * only once the scratch's previous content is dead. Halves the overhead of quantized storage.
 */
export const LIVE_ALIAS: Partial<Record<LayerSavedKey, string>> = { act: 'dF1', up: 'dF1', xIn: 'qRaw', xMid: 'dq', h1: 'dh', h2: 'dh', xFinal: 'qRaw', hF: 'dh' };

/**
 * Rows per block of the SwiGLU backward when `up` is stored (quantized, bf16 or f16). Its live copy is dF1, which
 * holds dact when the backward needs up, so up is dequantized (or unpacked) a block of rows at a time into the
 * small `swigluBlock` buffer, combined with gate and dact in place, and the block's dup written back
 * over its (consumed) dact rows: one [N, F] fp32 buffer fewer than dequantizing up whole. Blocks
 * start at 256-byte-aligned offsets of the codes and scales (storedRowsAligned; else fewer, larger blocks; 1 = whole).
 */
export function swigluBlockRows(d: ModelDims, storages: Partial<Record<LayerSavedKey, ActivationStorage>>[], force?: number): number {
  const ups = storages.flatMap((s) => (s.up ? [s.up] : []));
  const fits = (rows: number) => rows === d.N || (Number.isInteger(d.N / rows) && (rows * d.F * 4) % 256 === 0
    && ups.every((st) => storedRowsAligned(st, d.F, rows)));
  if (force !== undefined) {
    if (!fits(force)) throw new Error(`swiglu block rows ${force} do not divide ${d.N} rows at 256-byte-aligned offsets`);
    return force;
  }
  for (const blocks of [8, 4, 2]) if (fits(d.N / blocks)) return d.N / blocks;
  return d.N;
}

export function liveKey(k: LayerSavedKey): string {
  return LIVE_ALIAS[k] ?? `live.${k}`;
}

export function layerSizes(d: ModelDims): Record<LayerSavedKey, [number, number]> {
  // [elements, row length]
  return {
    xIn: [d.N * d.C, d.C], rstd1: [d.N, 1], h1: [d.N * d.C, d.C], q: [d.N * d.QC, d.QC], k: [d.N * d.KVC, d.KVC],
    v: [d.N * d.KVC, d.KVC], o: [d.N * d.QC, d.QC], lse: [d.B * d.nH * d.T, d.T], xMid: [d.N * d.C, d.C], rstd2: [d.N, 1],
    h2: [d.N * d.C, d.C], gate: [d.N * d.F, d.F], up: [d.N * d.F, d.F], act: [d.N * d.F, d.F],
    xFinal: [d.N * d.C, d.C], hF: [d.N * d.C, d.C],
  };
}

/**
 * The storage of every saved tensor of layer l under a scheme (absent = fp32); l = L holds the final
 * norm's tensors, priced by the last layer's cells. Only training saves.
 */
export function layerStorage(d: ModelDims, scheme: Scheme | undefined, l: number): Partial<Record<LayerSavedKey, ActivationStorage>> {
  const out: Partial<Record<LayerSavedKey, ActivationStorage>> = {};
  if (!scheme) return out;
  const sizes = layerSizes(d);
  const keys = l < d.L ? LAYER_SAVED : FINAL_SAVED;
  const cellLayer = Math.min(l, d.L - 1);
  for (const key of keys) {
    const kind = SAVED_KIND_OF[key];
    if (!kind) continue;
    const st = activationStorage(savedSpec(scheme, cellLayer, kind), sizes[key][0], sizes[key][1]);
    if (st) out[key] = st;
  }
  return out;
}
