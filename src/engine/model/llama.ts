/**
 * LLaMA on WebGPU: every buffer from one plan (so `--plan` and the allocator agree by construction),
 * and the whole training step — forward, loss, backward, global-norm clipping, AdamW — as one list of
 * dispatches built once and encoded into one command buffer per step.
 *
 * Shapes: B batch, T context, N = B·T tokens, C hidden, F intermediate, nH/nKV query/KV heads,
 * D head dim, V vocab, L layers. Activations are row-major [N, ·]; weights are HF [out, in].
 */
import { BUFFER_USAGE, type MemCategory } from '../gpu/memory';
import { type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward } from '../kernels/attention';
import { crossEntropyForwardBackward, crossEntropyWorkspaceBytes } from '../kernels/crossentropy';
import { copy } from '../kernels/elementwise';
import { embeddingBackward, embeddingForward, embeddingWorkspaceBytes } from '../kernels/embedding';
import { matmul } from '../kernels/matmul';
import { globalNorm, globalNormPartialsBytes, normFinalize, sumSquaresPartialCount, sumSquaresPartials } from '../kernels/reduce';
import { rmsnormBackward, rmsnormForward, rmsnormWorkspaceBytes } from '../kernels/rmsnorm';
import { rope, ropeTablePacked } from '../kernels/rope';
import { swigluBackward, swigluForward } from '../kernels/swiglu';
import { adamw, ADAMW_STEP_BYTES } from '../optim/adamw';
import { buildDequantize, buildQuantize } from '../kernels/quantize';
import { BITS, type QuantFormat } from '../quant/formats';
import { type CodeBits, wordsFor } from '../quant/pack';
import { type Granularity, numScales } from '../quant/quantizer';
import { assertSupported, type QuantSpec, savedSpec, type SavedKind, type Scheme } from '../scheme/scheme';
import { SCHEME_PRESETS } from '../scheme/presets';
import { headDim, type ModelConfig } from './config';
import { tpActive, tpBufferPlan, TpSim } from './tp';
import { qdq, type QdqDispatches } from '../kernels/qdq';
import { isFp32, layerScheme } from '../scheme/scheme';
import { deriveSeed } from '../util/rng';
import { type ParamLayout, paramLayout } from './params';

export interface BufferSpec {
  key: string;
  category: MemCategory;
  bytes: number;
  usage?: GPUBufferUsageFlags;
}

export interface PlanOptions {
  /** false: forward only (evaluation, sampling) — no grads, optimizer state or backward workspace. */
  training?: boolean;
  scheme?: Scheme;
  /** false: the weights belong to another model (a B=1 sampler beside the trainer). */
  ownWeights?: boolean;
}

export interface ModelBuildOptions {
  training?: boolean;
  scheme?: Scheme;
  /** Bind another model's weights instead of allocating them. */
  sharedWeights?: GPUBuffer;
}

export interface ModelDims {
  B: number; T: number; N: number; C: number; F: number; nH: number; nKV: number; D: number; KVC: number; V: number; L: number;
}

export function modelDims(cfg: ModelConfig, B: number, T: number): ModelDims {
  const D = headDim(cfg);
  return {
    B, T, N: B * T, C: cfg.hidden_size, F: cfg.intermediate_size, nH: cfg.num_attention_heads,
    nKV: cfg.num_key_value_heads, D, KVC: cfg.num_key_value_heads * D, V: cfg.vocab_size, L: cfg.num_hidden_layers,
  };
}

/** Saved-for-backward tensors of one layer (the schemes re-price these). */
export const LAYER_SAVED = ['xIn', 'rstd1', 'h1', 'q', 'k', 'v', 'o', 'lse', 'xMid', 'rstd2', 'h2', 'gate', 'up', 'act'] as const;
/** Saved tensors after the last layer: the final norm's input and output (the lm_head input). */
export const FINAL_SAVED = ['xFinal', 'hF'] as const;
export type LayerSavedKey = (typeof LAYER_SAVED)[number] | (typeof FINAL_SAVED)[number];

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

/** Storage of one saved tensor: fp32, or packed codes + fp32 scales (a `Quantized` on the GPU). */
export interface SavedStorage {
  format: QuantFormat;
  granularity: Granularity;
  n: number;
  words: number;
  scales: number;
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

/** Per-tensor storage of the gradients under a scheme's grads.storage (null = one fp32 flat buffer). */
export function gradStorage(layout: ParamLayout, scheme: Scheme | undefined): Map<string, SavedStorage> | null {
  const spec = scheme?.grads.storage;
  if (!spec || isFp32(spec)) return null;
  return new Map(layout.views.map((v) => [v.name, savedStorage(spec, v.size, v.shape[v.shape.length - 1])!]));
}

function studyFlags(s: Scheme | undefined, L: number): { weights: boolean; inputs: boolean; grads: boolean } {
  const r = { weights: false, inputs: false, grads: false };
  if (!s) return r;
  for (let l = 0; l < L; l++) {
    const ls = layerScheme(s, l);
    r.weights ||= !isFp32(ls.weights);
    r.inputs ||= !isFp32(ls.gemm_inputs);
    r.grads ||= !isFp32(ls.gemm_output_grads);
  }
  return r;
}

const LINEAR = ['self_attn.q_proj', 'self_attn.k_proj', 'self_attn.v_proj', 'self_attn.o_proj', 'mlp.gate_proj', 'mlp.up_proj', 'mlp.down_proj'];

/**
 * Live copies that reuse a backward scratch buffer of the same size instead of their own: in the
 * forward pass these buffers are free, and the backward order (buildBackward) reloads each live copy
 * only once the scratch's previous content is dead. Halves the overhead of quantized storage.
 */
const LIVE_ALIAS: Partial<Record<LayerSavedKey, string>> = { act: 'dF1', xIn: 'qRaw', xMid: 'dq', h1: 'dh', h2: 'dh', xFinal: 'qRaw', hF: 'dh' };

function liveKey(k: LayerSavedKey): string {
  return LIVE_ALIAS[k] ?? `live.${k}`;
}

function layerSizes(d: ModelDims): Record<LayerSavedKey, [number, number]> {
  // [elements, row length]
  return {
    xIn: [d.N * d.C, d.C], rstd1: [d.N, 1], h1: [d.N * d.C, d.C], q: [d.N * d.C, d.C], k: [d.N * d.KVC, d.KVC],
    v: [d.N * d.KVC, d.KVC], o: [d.N * d.C, d.C], lse: [d.B * d.nH * d.T, d.T], xMid: [d.N * d.C, d.C], rstd2: [d.N, 1],
    h2: [d.N * d.C, d.C], gate: [d.N * d.F, d.F], up: [d.N * d.F, d.F], act: [d.N * d.F, d.F],
    xFinal: [d.N * d.C, d.C], hF: [d.N * d.C, d.C],
  };
}

/**
 * The storage of every saved tensor of layer l under a scheme (absent = fp32); l = L holds the final
 * norm's tensors, priced by the last layer's cells. Only training saves.
 */
export function layerStorage(d: ModelDims, scheme: Scheme | undefined, l: number): Partial<Record<LayerSavedKey, SavedStorage>> {
  const out: Partial<Record<LayerSavedKey, SavedStorage>> = {};
  if (!scheme) return out;
  const sizes = layerSizes(d);
  const keys = l < d.L ? LAYER_SAVED : FINAL_SAVED;
  const cellLayer = Math.min(l, d.L - 1);
  for (const key of keys) {
    const kind = SAVED_KIND_OF[key];
    if (!kind) continue;
    const st = savedStorage(savedSpec(scheme, cellLayer, kind), sizes[key][0], sizes[key][1]);
    if (st) out[key] = st;
  }
  return out;
}

/** Every buffer the training step allocates, in bytes. The single source for allocation and `--plan`. */
export function modelBufferPlan(cfg: ModelConfig, B: number, T: number, opts: PlanOptions = {}): BufferSpec[] {
  const training = opts.training ?? true;
  const d = modelDims(cfg, B, T);
  const layout = paramLayout(cfg);
  const f = 4;
  const P = layout.totalFloats * f;
  const out: BufferSpec[] = [];
  if (opts.ownWeights ?? true) out.push({ key: 'weights', category: 'weights', bytes: P });
  const gradStore = training ? gradStorage(layout, opts.scheme) : null;
  if (training) {
    if (!gradStore) out.push({ key: 'grads', category: 'grads', bytes: P });
    else {
      // AGoQ's 8-bit gradient storage: codes + scales per tensor; each gradient is produced in fp32
      // into a stage the size of the largest tensor and quantized right away.
      for (const [name, st] of gradStore) {
        out.push({ key: `grads.codes.${name}`, category: 'grads', bytes: st.words * 4 });
        out.push({ key: `grads.scales.${name}`, category: 'grads', bytes: st.scales * 4 });
      }
      out.push({ key: 'gradStage', category: 'workspace', bytes: Math.max(...layout.views.map((v) => v.size)) * 4 });
      // Tied embeddings collect lm_head's and the embedding's gradient across the whole backward.
      if (cfg.tie_word_embeddings) out.push({ key: 'gradEmbed', category: 'workspace', bytes: d.V * d.C * 4 });
    }
    out.push({ key: 'adam.m', category: 'optimizer', bytes: P }, { key: 'adam.v', category: 'optimizer', bytes: P });
  }
  const act = (key: string, floats: number) => out.push({ key, category: 'activations', bytes: floats * f });
  const ws = (key: string, bytes: number) => out.push({ key, category: 'workspace', bytes });
  act('ids', d.N);
  const sizes = layerSizes(d);
  const live = new Set<LayerSavedKey>();
  for (let l = 0; l <= d.L; l++) {
    const st = layerStorage(d, training ? opts.scheme : undefined, l);
    for (const k of l < d.L ? LAYER_SAVED : FINAL_SAVED) {
      const q = st[k];
      if (!q) {
        act(`L${l}.${k}`, sizes[k][0]);
        continue;
      }
      // Quantized storage: codes and scales are what stays alive for backward.
      out.push({ key: `L${l}.${k}.codes`, category: 'activations', bytes: q.words * 4 });
      out.push({ key: `L${l}.${k}.scales`, category: 'activations', bytes: q.scales * 4 });
      live.add(k);
    }
  }
  // One fp32 working copy per quantized kind, shared by all layers: forward writes it before
  // quantizing, backward dequantizes into it before the consumers read it.
  for (const k of live) if (!LIVE_ALIAS[k]) ws(liveKey(k), sizes[k][0] * f);
  act('rstdF', d.N);
  act('logits', d.N * d.V); // becomes dlogits in place
  ws('targets', d.N * f);
  ws('qRaw', d.N * d.C * f);
  ws('kRaw', d.N * d.KVC * f);
  ws('losses', d.N * f);
  ws('loss', 16);
  ws('ceWs', crossEntropyWorkspaceBytes());
  // Loss and gradient norm come back through this small mappable buffer once per step.
  out.push({ key: 'readback', category: 'workspace', bytes: 16, usage: BUFFER_USAGE.MAP_READ | BUFFER_USAGE.COPY_DST });
  ws('rope', 2 * d.T * (d.D / 2) * f);
  if (tpActive(opts.scheme)) out.push(...tpBufferPlan(d, opts.scheme.tp));
  // The quantized pre-training study's fake quantization: a quantized copy of the weights for the
  // GEMMs (master weights stay fp32), of each GEMM input, and of each output gradient on the dW path.
  const st = studyFlags(opts.scheme, d.L);
  if (st.weights) ws('wq', P);
  if (st.inputs) ws('aq', d.N * Math.max(d.C, d.F) * f);
  if (training && st.grads) ws('gq', d.N * Math.max(d.C, d.F) * f);
  if (training) {
    ws('dres', d.N * d.C * f);
    ws('dh', d.N * d.C * f);
    ws('dF1', d.N * d.F * f);
    ws('dq', d.N * d.C * f);
    ws('dk', d.N * d.KVC * f);
    ws('dv', d.N * d.KVC * f);
    ws('attnWs', attentionBackwardWorkspaceBytes(d.B, d.T, d.nH));
    ws('normWs', rmsnormWorkspaceBytes({ N: d.N, C: d.C }));
    ws('embedWs', embeddingWorkspaceBytes({ N: d.N, V: d.V }));
    ws('normPartials', gradStore ? globalNormPartialsBytes(layout.views.map((v) => v.size)) : globalNormPartialsBytes(layout.totalFloats));
    ws('gradNorm', 16);
    out.push({ key: 'stepParams', category: 'workspace', bytes: ADAMW_STEP_BYTES, usage: BUFFER_USAGE.UNIFORM | BUFFER_USAGE.COPY_DST });
  }
  return out;
}

export class LlamaGpu {
  readonly layout: ParamLayout;
  readonly dims: ModelDims;
  readonly buf = new Map<string, GPUBuffer>();
  /** Forward + loss (also used for evaluation). */
  readonly forward: Dispatch[] = [];
  /** Backward, clipping and optimizer (after `forward` in a training step). */
  readonly backward: Dispatch[] = [];
  readonly optimizer: Dispatch[] = [];
  private readonly ownsWeights: boolean;
  private logitsEnd = 0;

  readonly training: boolean;
  readonly scheme: Scheme;
  /** Per layer: storage of the quantized saved tensors (absent = fp32). */
  readonly storage: Partial<Record<LayerSavedKey, SavedStorage>>[] = [];
  /** Simulated tensor parallelism (scheme.tp.degree > 1), else null. */
  private readonly tp: TpSim | null;
  /** Quantized gradient storage per tensor, or null for the fp32 flat gradient buffer. */
  private readonly gradStore: Map<string, SavedStorage> | null;
  /** Fake-quantization kernels whose stochastic-rounding seed changes every step. */
  private readonly srKernels: { label: string; k: QdqDispatches }[] = [];

  constructor(readonly rt: Runtime, readonly cfg: ModelConfig, B: number, T: number, opts: ModelBuildOptions = {}) {
    if (T > cfg.max_position_embeddings) {
      throw new Error(`context ${T} exceeds max_position_embeddings ${cfg.max_position_embeddings}`);
    }
    this.training = opts.training ?? true;
    this.scheme = opts.scheme ?? SCHEME_PRESETS.fp32;
    assertSupported(this.scheme);
    this.layout = paramLayout(cfg);
    this.dims = modelDims(cfg, B, T);
    for (let l = 0; l <= this.dims.L; l++) this.storage.push(layerStorage(this.dims, this.training ? this.scheme : undefined, l));
    for (const s of modelBufferPlan(cfg, B, T, { training: this.training, ownWeights: !opts.sharedWeights, scheme: this.scheme })) this.buf.set(s.key, rt.createBuffer(s.category, s.key, s.bytes, s.usage));
    if (opts.sharedWeights) this.buf.set('weights', opts.sharedWeights);
    this.ownsWeights = !opts.sharedWeights;
    const training = this.training;
    rt.write(this.b('rope'), ropeTablePacked(T, this.dims.D, cfg.rope_theta));
    this.gradStore = this.training ? gradStorage(this.layout, this.scheme) : null;
    this.tp = tpActive(this.scheme) ? new TpSim(rt, this.dims, this.scheme.tp, (k) => this.b(k)) : null;
    this.buildForward();
    if (training) {
      this.buildBackward();
      this.buildOptimizer();
    }
  }

  b(key: string): GPUBuffer {
    const x = this.buf.get(key);
    if (!x) throw new Error(`no buffer ${key}`);
    return x;
  }

  /** A parameter (or its gradient) as a binding slice of the flat buffer. */
  param(name: string, which: 'weights' | 'grads' = 'weights'): Binding {
    const v = this.layout.byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return { buffer: this.b(which), offset: v.offset * 4, size: v.size * 4 };
  }

  /** The fp32 binding of a layer's saved tensor: its own buffer, or the shared live copy when stored quantized. */
  saved(l: number, key: LayerSavedKey): GPUBuffer {
    return this.storage[l][key] ? this.b(liveKey(key)) : this.b(`L${l}.${key}`);
  }

  /** Dispatches that quantize the live copy of (l, key) into its codes (nothing when fp32). */
  private storeSaved(l: number, key: LayerSavedKey): Dispatch[] {
    const st = this.storage[l][key];
    if (!st) return [];
    return buildQuantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n }, this.b(liveKey(key)), {
      words: this.b(`L${l}.${key}.codes`), scales: this.b(`L${l}.${key}.scales`),
    }).dispatches;
  }

  /** Dispatches that dequantize (l, key) back into its live copy before backward reads it. */
  private loadSaved(l: number, key: LayerSavedKey): Dispatch[] {
    const st = this.storage[l][key];
    if (!st) return [];
    return buildDequantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n },
      this.b(`L${l}.${key}.codes`), this.b(`L${l}.${key}.scales`), { out: this.b(liveKey(key)) }).dispatches;
  }

  /** The buffer the GEMMs read a weight from: the fake-quantized copy when layer l quantizes weights. */
  private gemmWeights(l: number): GPUBuffer {
    return isFp32(layerScheme(this.scheme, l).weights) ? this.b('weights') : this.b('wq');
  }

  /** A linear weight of layer l as the GEMMs see it. */
  private lin(l: number, s: string): Binding {
    const v = this.layout.byName.get(`model.layers.${l}.${s}`);
    if (!v) throw new Error(`no parameter model.layers.${l}.${s}`);
    return { buffer: this.gemmWeights(l), offset: v.offset * 4, size: v.size * 4 };
  }

  /** The GEMM weights buffer and byte offset of a parameter (for sub-slices such as a TP rank's rows). */
  private weightAt(l: number, name: string): { w: GPUBuffer; wOffset: number } {
    const v = this.layout.byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return { w: this.gemmWeights(l), wOffset: v.offset * 4 };
  }

  private fakeQuant(label: string, x: Binding, n: number, rowLength: number, spec: QuantSpec): Dispatch[] {
    const k = qdq(this.rt, { label, x, n, rowLength, spec });
    if (spec.rounding === 'stochastic') this.srKernels.push({ label, k });
    return [...k];
  }

  /** Fake-quantizes a copy of a GEMM input (per the layer's gemm_inputs cell) and returns what the GEMMs read. */
  private gemmInput(l: number, label: string, x: GPUBuffer, width: number, push: (d: Dispatch | Dispatch[]) => void): Binding {
    const spec = layerScheme(this.scheme, l).gemm_inputs;
    if (isFp32(spec)) return x;
    const n = this.dims.N * width;
    const aq: Binding = { buffer: this.b('aq'), offset: 0, size: n * 4 };
    push(copy(this.rt, { label: `${label}.aq`, src: x, dst: aq, n }));
    push(this.fakeQuant(`${label}.aq`, aq, n, width, spec));
    return aq;
  }

  /** The output gradient a dW GEMM reads: fake-quantized per token when the layer's gemm_output_grads cell asks. */
  private dwGrad(l: number, label: string, dy: GPUBuffer, width: number, push: (d: Dispatch | Dispatch[]) => void): Binding {
    const spec = layerScheme(this.scheme, l).gemm_output_grads;
    if (isFp32(spec)) return dy;
    const n = this.dims.N * width;
    const gq: Binding = { buffer: this.b('gq'), offset: 0, size: n * 4 };
    push(copy(this.rt, { label: `${label}.gq`, src: dy, dst: gq, n }));
    push(this.fakeQuant(`${label}.gq`, gq, n, width, spec));
    return gq;
  }

  /** Where a gradient is produced: its slice of the flat fp32 buffer, or the fp32 stage before quantization. */
  private gradOut(name: string): Binding {
    const v = this.layout.byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    if (!this.gradStore) return { buffer: this.b('grads'), offset: v.offset * 4, size: v.size * 4 };
    const stage = this.cfg.tie_word_embeddings && name === 'model.embed_tokens.weight' ? this.b('gradEmbed') : this.b('gradStage');
    return { buffer: stage, offset: 0, size: v.size * 4 };
  }

  /** Quantizes a just-produced gradient into its storage (nothing with fp32 gradients). */
  private storeGrad(name: string): Dispatch[] {
    const st = this.gradStore?.get(name);
    if (!st) return [];
    const stage = this.cfg.tie_word_embeddings && name === 'model.embed_tokens.weight' ? this.b('gradEmbed') : this.b('gradStage');
    return buildQuantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n }, stage, {
      words: this.b(`grads.codes.${name}`), scales: this.b(`grads.scales.${name}`),
    }).dispatches;
  }

  /** Dequantizes a stored gradient into the fp32 stage (for the norm and the optimizer). */
  private loadGrad(name: string): Dispatch[] {
    const st = this.gradStore!.get(name)!;
    return buildDequantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n },
      this.b(`grads.codes.${name}`), this.b(`grads.scales.${name}`), { out: this.b('gradStage') }).dispatches;
  }

  /** Rewrites the stochastic-rounding seeds of the fake quantizers (once per step). */
  setStepSeed(step: number): void {
    for (const { label, k } of this.srKernels) k.setSeed(deriveSeed(step, label));
  }

  private lmHead(): string {
    return this.cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  }

  private buildForward(): void {
    const { rt, cfg } = this;
    const { B, T, N, C, F, nH, nKV, D, KVC, V, L } = this.dims;
    const eps = cfg.rms_norm_eps;
    const f = this.forward;
    const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? f.push(...d) : f.push(d));
    if (this.buf.has('wq')) {
      // Fake-quantized weights for this step's GEMMs, per output channel (row of W [out, in]).
      push(copy(rt, { label: 'wq', src: this.b('weights'), dst: this.b('wq'), n: this.layout.totalFloats }));
      for (let l = 0; l < L; l++) {
        const spec = layerScheme(this.scheme, l).weights;
        if (isFp32(spec)) continue;
        for (const name of LINEAR) {
          const v = this.layout.byName.get(`model.layers.${l}.${name}.weight`)!;
          push(this.fakeQuant(`L${l}.${name}.wq`, { buffer: this.b('wq'), offset: v.offset * 4, size: v.size * 4 }, v.size, v.shape[1], spec));
        }
      }
    }
    push(embeddingForward(rt, { label: 'embed', ids: this.b('ids'), W: this.param('model.embed_tokens.weight'), out: this.saved(0, 'xIn'), dims: { N, V, C } }));
    for (let l = 0; l < L; l++) {
      const p = (s: string) => this.param(`model.layers.${l}.${s}`);
      const a = (s: LayerSavedKey) => this.saved(l, s);
      const lab = (s: string) => `L${l}.${s}`;
      const next = l + 1 < L ? this.saved(l + 1, 'xIn') : this.saved(L, 'xFinal');
      const store = (k: LayerSavedKey) => push(this.storeSaved(l, k));
      store('xIn');
      push(rmsnormForward(rt, { label: lab('norm1'), x: a('xIn'), w: p('input_layernorm.weight'), y: a('h1'), rstd: a('rstd1'), dims: { N, C, eps } }));
      // Residual copy first: xIn is dead after this (its live copy may be qRaw, written next).
      push(copy(rt, { label: lab('resid1'), src: a('xIn'), dst: a('xMid'), n: N * C }));
      store('h1');
      const h1 = this.gemmInput(l, lab('qkv_in'), a('h1'), C, push);
      push(matmul(rt, { label: lab('q_proj'), a: h1, b: this.lin(l, 'self_attn.q_proj.weight'), c: this.b('qRaw'), M: N, N: C, K: C, transB: true }));
      push(matmul(rt, { label: lab('k_proj'), a: h1, b: this.lin(l, 'self_attn.k_proj.weight'), c: this.b('kRaw'), M: N, N: KVC, K: C, transB: true }));
      push(matmul(rt, { label: lab('v_proj'), a: h1, b: this.lin(l, 'self_attn.v_proj.weight'), c: a('v'), M: N, N: KVC, K: C, transB: true }));
      store('v');
      push(rope(rt, { label: lab('rope_q'), x: this.b('qRaw'), y: a('q'), table: this.b('rope'), B, T, nHeads: nH, D }));
      store('q');
      push(rope(rt, { label: lab('rope_k'), x: this.b('kRaw'), y: a('k'), table: this.b('rope'), B, T, nHeads: nKV, D }));
      store('k');
      push(attentionForward(rt, { label: lab('attn'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), B, T, nH, nKV, D }));
      store('o');
      const oIn = this.gemmInput(l, lab('o_in'), a('o'), C, push);
      // xMid = xIn + o·Woᵀ: the GEMM accumulates onto the residual copy.
      if (this.tp) push(this.tp.rowParallel(lab('o_proj.tp'), oIn, this.lin(l, 'self_attn.o_proj.weight'), C, a('xMid')));
      else push(matmul(rt, { label: lab('o_proj'), a: oIn, b: this.lin(l, 'self_attn.o_proj.weight'), c: a('xMid'), M: N, N: C, K: C, transB: true, accumulate: true }));
      store('xMid');
      push(rmsnormForward(rt, { label: lab('norm2'), x: a('xMid'), w: p('post_attention_layernorm.weight'), y: a('h2'), rstd: a('rstd2'), dims: { N, C, eps } }));
      store('h2');
      const h2 = this.gemmInput(l, lab('mlp_in'), a('h2'), C, push);
      push(matmul(rt, { label: lab('gate_proj'), a: h2, b: this.lin(l, 'mlp.gate_proj.weight'), c: a('gate'), M: N, N: F, K: C, transB: true }));
      store('gate');
      push(matmul(rt, { label: lab('up_proj'), a: h2, b: this.lin(l, 'mlp.up_proj.weight'), c: a('up'), M: N, N: F, K: C, transB: true }));
      store('up');
      push(swigluForward(rt, { label: lab('swiglu'), gate: a('gate'), up: a('up'), h: a('act'), dims: { N, F } }));
      store('act');
      const actIn = this.gemmInput(l, lab('down_in'), a('act'), F, push);
      push(copy(rt, { label: lab('resid2'), src: a('xMid'), dst: next, n: N * C }));
      if (this.tp) push(this.tp.rowParallel(lab('down_proj.tp'), actIn, this.lin(l, 'mlp.down_proj.weight'), F, next));
      else push(matmul(rt, { label: lab('down_proj'), a: actIn, b: this.lin(l, 'mlp.down_proj.weight'), c: next, M: N, N: C, K: F, transB: true, accumulate: true }));
    }
    push(this.storeSaved(L, 'xFinal'));
    push(rmsnormForward(rt, { label: 'normF', x: this.saved(L, 'xFinal'), w: this.param('model.norm.weight'), y: this.saved(L, 'hF'), rstd: this.b('rstdF'), dims: { N, C, eps } }));
    push(this.storeSaved(L, 'hF'));
    push(matmul(rt, { label: 'lm_head', a: this.saved(L, 'hF'), b: this.param(this.lmHead()), c: this.b('logits'), M: N, N: V, K: C, transB: true }));
    this.logitsEnd = f.length;
    // Fused CE forward+backward: per-row losses, their mean, and dlogits in place of the logits.
    const logits = this.b('logits');
    push(crossEntropyForwardBackward(rt, { label: 'xent', logits, dlogits: logits, targets: this.b('targets'), losses: this.b('losses'), loss: this.b('loss'), workspace: this.b('ceWs'), dims: { N, V } }));
  }

  /**
   * The order matters for memory: a quantized tensor is dequantized into its live copy just before
   * its consumers, and several live copies share backward scratch buffers (LIVE_ALIAS), so each
   * scratch buffer's previous content must be dead by then. Weight gradients that read a live copy
   * run before the input-gradient GEMM that overwrites the same scratch.
   */
  private buildBackward(): void {
    const { rt } = this;
    const { B, T, N, C, F, nH, nKV, D, KVC, V, L } = this.dims;
    const eps = this.cfg.rms_norm_eps;
    const g = this.backward;
    const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? g.push(...d) : g.push(d));
    // Each gradient producer writes gradOut(name); store(name) then quantizes it (AGoQ storage).
    const gp = (name: string) => this.gradOut(name);
    const store = (name: string) => push(this.storeGrad(name));
    const dlogits = this.b('logits');
    const dh = this.b('dh');
    const dres = this.b('dres');
    const dF1 = this.b('dF1');
    const normWs = this.b('normWs');
    // dW first: hF's live copy is dh, which lm_head.dx then overwrites.
    push(this.loadSaved(L, 'hF'));
    push(matmul(rt, { label: 'lm_head.dw', a: dlogits, b: this.saved(L, 'hF'), c: gp(this.lmHead()), M: V, N: C, K: N, transA: true }));
    if (!this.cfg.tie_word_embeddings) store(this.lmHead());
    push(matmul(rt, { label: 'lm_head.dx', a: dlogits, b: this.param(this.lmHead()), c: dh, M: N, N: C, K: V }));
    push(this.loadSaved(L, 'xFinal'));
    push(rmsnormBackward(rt, { label: 'normF.bwd', x: this.saved(L, 'xFinal'), w: this.param('model.norm.weight'), rstd: this.b('rstdF'), dy: dh, dx: dres, dw: gp('model.norm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: false }));
    store('model.norm.weight');
    for (let l = L - 1; l >= 0; l--) {
      const p = (s: string) => this.param(`model.layers.${l}.${s}`);
      const gr = (s: string) => gp(`model.layers.${l}.${s}`);
      const storeL = (s: string) => store(`model.layers.${l}.${s}`);
      const a = (s: LayerSavedKey) => this.saved(l, s);
      const load = (k: LayerSavedKey) => push(this.loadSaved(l, k));
      const lab = (s: string) => `L${l}.${s}`;
      // MLP. dWdown = dresᵀ·act first: act's live copy is dF1, which down.dx then overwrites with dact.
      load('act');
      push(matmul(rt, { label: lab('down.dw'), a: this.dwGrad(l, lab('down.dw'), dres, C, push), b: a('act'), c: gr('mlp.down_proj.weight'), M: C, N: F, K: N, transA: true }));
      storeL('mlp.down_proj.weight');
      push(matmul(rt, { label: lab('down.dx'), a: dres, b: this.lin(l, 'mlp.down_proj.weight'), c: dF1, M: N, N: F, K: C }));
      load('gate');
      load('up');
      // SwiGLU backward in place: gate and up become dgate and dup.
      push(swigluBackward(rt, { label: lab('swiglu.bwd'), gate: a('gate'), up: a('up'), dh: dF1, dgate: a('gate'), dup: a('up'), dims: { N, F } }));
      load('h2'); // live copy in dh
      push(matmul(rt, { label: lab('gate.dw'), a: this.dwGrad(l, lab('gate.dw'), a('gate'), F, push), b: a('h2'), c: gr('mlp.gate_proj.weight'), M: F, N: C, K: N, transA: true }));
      storeL('mlp.gate_proj.weight');
      push(matmul(rt, { label: lab('up.dw'), a: this.dwGrad(l, lab('up.dw'), a('up'), F, push), b: a('h2'), c: gr('mlp.up_proj.weight'), M: F, N: C, K: N, transA: true }));
      storeL('mlp.up_proj.weight');
      if (this.tp) {
        push(this.tp.columnParallelDx(lab('mlp.dx.tp'), [
          { dy: a('gate'), ...this.weightAt(l, `model.layers.${l}.mlp.gate_proj.weight`), rows: F },
          { dy: a('up'), ...this.weightAt(l, `model.layers.${l}.mlp.up_proj.weight`), rows: F },
        ], dh));
      } else {
        push(matmul(rt, { label: lab('gate.dx'), a: a('gate'), b: this.lin(l, 'mlp.gate_proj.weight'), c: dh, M: N, N: C, K: F }));
        push(matmul(rt, { label: lab('up.dx'), a: a('up'), b: this.lin(l, 'mlp.up_proj.weight'), c: dh, M: N, N: C, K: F, accumulate: true }));
      }
      load('xMid'); // live copy in dq (free until the attention backward)
      push(rmsnormBackward(rt, { label: lab('norm2.bwd'), x: a('xMid'), w: p('post_attention_layernorm.weight'), rstd: a('rstd2'), dy: dh, dx: dres, dw: gr('post_attention_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true }));
      storeL('post_attention_layernorm.weight');
      // Attention: dWo = dresᵀ·o, dO = dres·Wo (into dh, free again).
      load('o');
      push(matmul(rt, { label: lab('o.dw'), a: this.dwGrad(l, lab('o.dw'), dres, C, push), b: a('o'), c: gr('self_attn.o_proj.weight'), M: C, N: C, K: N, transA: true }));
      storeL('self_attn.o_proj.weight');
      push(matmul(rt, { label: lab('o.dx'), a: dres, b: this.lin(l, 'self_attn.o_proj.weight'), c: dh, M: N, N: C, K: C }));
      load('q');
      load('k');
      load('v');
      push(attentionBackward(rt, { label: lab('attn.bwd'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), dO: dh, dq: this.b('dq'), dk: this.b('dk'), dv: this.b('dv'), workspace: this.b('attnWs'), B, T, nH, nKV, D }));
      // Undo RoPE on dq, dk (qRaw/kRaw are free during backward and hold the results).
      push(rope(rt, { label: lab('rope_q.bwd'), x: this.b('dq'), y: this.b('qRaw'), table: this.b('rope'), B, T, nHeads: nH, D, inverse: true }));
      push(rope(rt, { label: lab('rope_k.bwd'), x: this.b('dk'), y: this.b('kRaw'), table: this.b('rope'), B, T, nHeads: nKV, D, inverse: true }));
      load('h1'); // live copy in dh (dO is consumed)
      push(matmul(rt, { label: lab('q.dw'), a: this.dwGrad(l, lab('q.dw'), this.b('qRaw'), C, push), b: a('h1'), c: gr('self_attn.q_proj.weight'), M: C, N: C, K: N, transA: true }));
      storeL('self_attn.q_proj.weight');
      push(matmul(rt, { label: lab('k.dw'), a: this.dwGrad(l, lab('k.dw'), this.b('kRaw'), KVC, push), b: a('h1'), c: gr('self_attn.k_proj.weight'), M: KVC, N: C, K: N, transA: true }));
      storeL('self_attn.k_proj.weight');
      push(matmul(rt, { label: lab('v.dw'), a: this.dwGrad(l, lab('v.dw'), this.b('dv'), KVC, push), b: a('h1'), c: gr('self_attn.v_proj.weight'), M: KVC, N: C, K: N, transA: true }));
      storeL('self_attn.v_proj.weight');
      if (this.tp) {
        push(this.tp.columnParallelDx(lab('qkv.dx.tp'), [
          { dy: this.b('qRaw'), ...this.weightAt(l, `model.layers.${l}.self_attn.q_proj.weight`), rows: C },
          { dy: this.b('kRaw'), ...this.weightAt(l, `model.layers.${l}.self_attn.k_proj.weight`), rows: KVC },
          { dy: this.b('dv'), ...this.weightAt(l, `model.layers.${l}.self_attn.v_proj.weight`), rows: KVC },
        ], dh));
      } else {
        push(matmul(rt, { label: lab('q.dx'), a: this.b('qRaw'), b: this.lin(l, 'self_attn.q_proj.weight'), c: dh, M: N, N: C, K: C }));
        push(matmul(rt, { label: lab('k.dx'), a: this.b('kRaw'), b: this.lin(l, 'self_attn.k_proj.weight'), c: dh, M: N, N: C, K: KVC, accumulate: true }));
        push(matmul(rt, { label: lab('v.dx'), a: this.b('dv'), b: this.lin(l, 'self_attn.v_proj.weight'), c: dh, M: N, N: C, K: KVC, accumulate: true }));
      }
      load('xIn'); // live copy in qRaw (consumed by q.dx above)
      push(rmsnormBackward(rt, { label: lab('norm1.bwd'), x: a('xIn'), w: p('input_layernorm.weight'), rstd: a('rstd1'), dy: dh, dx: dres, dw: gr('input_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true }));
      storeL('input_layernorm.weight');
    }
    push(embeddingBackward(rt, { label: 'embed.bwd', ids: this.b('ids'), dout: dres, dW: gp('model.embed_tokens.weight'), workspace: this.b('embedWs'), dims: { N, V, C }, accumulate: this.cfg.tie_word_embeddings }));
    store('model.embed_tokens.weight');
  }

  private buildOptimizer(): void {
    const { rt } = this;
    const o = this.optimizer;
    const n = this.layout.totalFloats;
    if (!this.gradStore) {
      o.push(...globalNorm(rt, { label: 'grad_norm', x: this.b('grads'), n, partials: this.b('normPartials'), out: this.b('gradNorm') }));
    } else {
      // The norm of the stored (dequantized) gradients, tensor by tensor into one partials array.
      let base = 0;
      for (const v of this.layout.views) {
        o.push(...this.loadGrad(v.name));
        o.push(sumSquaresPartials(rt, { label: `grad_norm.${v.name}`, x: this.b('gradStage'), n: v.size, partials: this.b('normPartials'), base }));
        base += sumSquaresPartialCount(v.size);
      }
      o.push(normFinalize(rt, { label: 'grad_norm', partials: this.b('normPartials'), count: base, out: this.b('gradNorm') }));
    }
    // The study's optimizer: m ← Q(m), v ← Q(v) (per row of each tensor) before the full-precision update.
    for (const [key, spec] of [['adam.m', this.scheme.adam.m], ['adam.v', this.scheme.adam.v]] as const) {
      if (isFp32(spec)) continue;
      for (const v of this.layout.views) {
        const rowLength = v.shape.length > 1 ? v.shape[v.shape.length - 1] : v.size;
        o.push(...this.fakeQuant(`${key}.${v.name}`, { buffer: this.b(key), offset: v.offset * 4, size: v.size * 4 }, v.size, rowLength, spec));
      }
    }
    if (this.gradStore) {
      const sl = (k: string, v: { offset: number; size: number }): Binding => ({ buffer: this.b(k), offset: v.offset * 4, size: v.size * 4 });
      for (const v of this.layout.views) {
        o.push(...this.loadGrad(v.name));
        o.push(adamw(rt, { label: `adamw.${v.name}`, param: sl('weights', v), grad: { buffer: this.b('gradStage'), offset: 0, size: v.size * 4 }, m: sl('adam.m', v), v: sl('adam.v', v), n: v.size, decay: v.decay, stepParams: this.b('stepParams'), gradNorm: this.b('gradNorm') }));
      }
      return;
    }
    for (const [range, decay] of [[this.layout.decayRange, true], [this.layout.noDecayRange, false]] as const) {
      const [s, e] = range;
      if (e <= s) continue;
      const sl = (k: string): Binding => ({ buffer: this.b(k), offset: s * 4, size: (e - s) * 4 });
      o.push(adamw(rt, { label: decay ? 'adamw.decay' : 'adamw.nodecay', param: sl('weights'), grad: sl('grads'), m: sl('adam.m'), v: sl('adam.v'), n: e - s, decay, stepParams: this.b('stepParams'), gradNorm: this.b('gradNorm') }));
    }
  }

  /** Writes a batch [B, T+1] of token ids: inputs = [:, :T], targets = [:, 1:]. */
  setBatch(tokens: Int32Array): void {
    const { B, T, V } = this.dims;
    if (tokens.length !== B * (T + 1)) throw new Error(`batch has ${tokens.length} tokens, expected ${B * (T + 1)}`);
    const ids = new Int32Array(B * T);
    const targets = new Int32Array(B * T);
    for (let b = 0; b < B; b++) {
      for (let t = 0; t < T; t++) {
        const x = tokens[b * (T + 1) + t];
        const y = tokens[b * (T + 1) + t + 1];
        if (x < 0 || x >= V || y < 0 || y >= V) throw new Error(`token id out of range [0, ${V}) at batch row ${b}`);
        ids[b * T + t] = x;
        targets[b * T + t] = y;
      }
    }
    this.rt.write(this.b('ids'), ids);
    this.rt.write(this.b('targets'), targets);
  }

  uploadParams(flat: Float32Array): void {
    if (flat.length !== this.layout.totalFloats) throw new Error('parameter buffer size mismatch');
    this.rt.write(this.b('weights'), flat);
  }

  async readParams(): Promise<Float32Array> {
    return this.rt.readF32(this.b('weights'), 0, this.layout.totalFloats);
  }

  async readFlat(key: 'weights' | 'grads' | 'adam.m' | 'adam.v'): Promise<Float32Array> {
    return this.rt.readF32(this.b(key), 0, this.layout.totalFloats);
  }

  /** Forward without the loss kernels: logits stay logits (sampling). */
  get forwardLogits(): Dispatch[] {
    return this.forward.slice(0, this.logitsEnd);
  }

  destroy(): void {
    for (const [k, b] of this.buf) if (k !== 'weights' || this.ownsWeights) this.rt.mem.free(b);
    this.buf.clear();
  }
}
