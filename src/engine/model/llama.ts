/**
 * LLaMA on WebGPU: buffers from one plan (plan.ts), and the whole training step — forward, loss,
 * backward (backward.ts), global-norm clipping, AdamW — as one list of dispatches built once and
 * encoded into one command buffer per step.
 *
 * Shapes: B batch, T context, N = B·T tokens, C hidden, F intermediate, nH/nKV query/KV heads,
 * D head dim, V vocab, L layers. Activations are row-major [N, ·]; weights are HF [out, in].
 */
import { type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { attentionForward } from '../kernels/attention/attention';
import { attentionForwardI8 } from '../kernels/attention/i8';
import { attentionForwardF16 } from '../kernels/attention/f16/attention-f16';
import { packHalf, unpackHalf, unpackHalfRows } from '../kernels/f16/f16';
import { castF16Operand } from '../kernels/matmul-f16/cast';
import { copy } from '../kernels/elementwise/elementwise';
import { embeddingForward } from '../kernels/embedding/embedding';
import { hashBuffers } from '../kernels/hash/hash';
import { buildDequantize, buildQuantize, dequantizeRows } from '../kernels/quantize/quantize';
import { globalNorm, normFinalize, sumSquaresPartialCount, sumSquaresPartials } from '../kernels/reduce/reduce';
import { rmsnormForward } from '../kernels/rmsnorm/rmsnorm';
import { rope, ropeF16, ropeTablePacked } from '../kernels/rope/rope';
import { f16AttnInputBindings, f16AttnQkvSlots, packF16Cell, unpackF16Cell } from './f16-operands';
import { adamw } from '../optim/adamw';
import { adamwScaled, lossScaleCheck, lossScaleUpdate, packLossScaleState } from '../optim/loss-scale-gpu';
import { LossScaler } from '../optim/loss-scale';
import { assertSupported, isFp32, type Scheme } from '../scheme/scheme';
import { deriveSeed } from '../util/rng';
import { forwardScoreCodes, ropeWithCodes } from './attention-scores';
import { buildBackward } from './backward';
import type { GemmInputSaved, GemmPath } from './compute-plan';
import { type ModelConfig } from './config';
import type { ParamLayout } from './params';
import {
  type ActivationStorage, isHalf, type LayerSavedKey, LINEAR, liveKey, type ModelBuildOptions, type ModelDims, savedKey, type SavedStorage,
} from './plan';
import type { LayerPaths } from './int8-gemms';
import { LinearGemms } from './linear-gemms';
import { buildLmHead } from './lm-head';
import type { ProbePoint } from './probe-point';
import type { RunPlan } from '../plan/run-plan';
import { type TensorParallel, TpSim } from './tp/tp';
import { TpPeer } from './tp/peer';
import { LoraGemms } from '../lora/gemms';

export * from './plan';
export * from '../plan/run-plan';
export type { ProbePoint };

export class LlamaGpu {
  readonly layout: ParamLayout;
  readonly dims: ModelDims;
  readonly buf = new Map<string, GPUBuffer>();
  /**
   * Forward + loss; in a training model also the LM head's backward (lm-head.ts: its logits exist a
   * chunk at a time), so the backward starts at the final norm. Evaluation runs `lossForward`.
   */
  readonly forward: Dispatch[] = [];
  /** Forward + loss only, nothing else written (evaluation): `forward` itself in a forward-only model. */
  readonly lossForward: Dispatch[] = [];
  /** Backward, clipping and optimizer (after `forward` in a training step). */
  readonly backward: Dispatch[] = [];
  /**
   * Per parameter: how many of `backward`'s dispatches must have run for its gradient (storage
   * included) to be final, nothing later in backward writing it (a tied embedding: after embed.bwd,
   * not lm_head's). What lets data parallelism send a bucket while the rest of backward runs.
   */
  readonly gradFinal = new Map<string, number>();
  readonly optimizer: Dispatch[] = [];
  /**
   * A frozen base's derived copies (LoRA: the f16 weight copies, the INT8 weight codes): run once per
   * upload (uploadParams, baseChanged) instead of at the start of every forward. Empty when the base trains.
   */
  readonly baseDerive: Dispatch[] = [];
  private readonly ownsWeights: boolean;
  /** Where the forward's layers and final norm end (the LM head's input hF is final). */
  private bodyEnd = 0;
  /** The LM head's chunks (plan.logitsRows): with one, the logits of the whole batch exist after bodyEnd + 1 dispatches. */
  private logitsChunks = 1;
  /** Where the optimizer list's gradient-norm dispatches end (a TP rank computes the norm across peers instead). */
  private normEnd = 0;

  readonly training: boolean;
  readonly scheme: Scheme;
  /** The scheme resolved for this model's shape: what it allocates, stores and quantizes. */
  readonly plan: RunPlan;
  /** Per layer: storage of the quantized (or bf16 / f16) saved tensors (absent = fp32). */
  readonly storage: Partial<Record<LayerSavedKey, ActivationStorage>>[];
  /**
   * Tensor parallelism (scheme.tp.degree > 1), else null: simulated on this device (TpSim), or,
   * with opts.tpRank, this model is one peer's shard (TpPeer) and its dispatch lists must be run
   * segment by segment with the all-reduces in between (src/parallel/tp/group.ts), never whole.
   */
  readonly tp: TensorParallel | null;
  /** Quantized gradient storage per tensor, or null for the fp32 flat gradient buffer. */
  private readonly gradStore: Map<string, SavedStorage> | null;
  /** The linear layers' GEMMs and their operand copies (fp32, fake-quantized or INT8). */
  private readonly g: LinearGemms;
  /**
   * Spots in the forward where a tensor and its quantized form are both live, keyed like the probe
   * sites of train/probe.ts (which measures ‖x − x̂‖/‖x‖ there on evaluation steps).
   */
  readonly probePoints = new Map<string, ProbePoint>();
  /** The kernel each layer's INT8 attention scores run on, by `L<l>.attn`. */
  readonly attnPaths = new Map<string, GemmPath>();

  readonly cfg: ModelConfig;
  /** Tests: the f16 attention's forced specs (ModelBuildOptions.f16Attention). */
  private readonly f16Attention: ModelBuildOptions['f16Attention'];
  /** The LoRA adapters' GEMMs (plan.lora), null when every parameter trains. */
  readonly lora: LoraGemms | null;

  /**
   * Builds what `plan` says (engine/plan resolves it once; the model never interprets a scheme).
   * A plan made without its own weights (ownWeights: false) binds `opts.sharedWeights`.
   */
  constructor(readonly rt: Runtime, plan: RunPlan, opts: ModelBuildOptions = {}) {
    const { cfg, dims } = plan;
    if (dims.T > cfg.max_position_embeddings) {
      throw new Error(`context ${dims.T} exceeds max_position_embeddings ${cfg.max_position_embeddings}`);
    }
    if (plan.ownWeights === !!opts.sharedWeights) {
      throw new Error(plan.ownWeights ? 'LlamaGpu: the plan allocates its own weights; sharedWeights would be ignored' : 'LlamaGpu: the plan has no weights of its own; pass sharedWeights');
    }
    this.cfg = cfg;
    this.f16Attention = opts.f16Attention;
    const T = dims.T;
    this.training = plan.training;
    this.plan = plan;
    this.scheme = this.plan.scheme;
    assertSupported(this.scheme);
    this.layout = this.plan.layout;
    this.dims = this.plan.dims;
    this.storage = this.plan.saved;
    for (const s of this.plan.buffers) this.buf.set(s.key, rt.createBuffer(s.category, s.key, s.bytes, s.usage));
    if (opts.sharedWeights) this.buf.set('weights', opts.sharedWeights);
    this.ownsWeights = !opts.sharedWeights;
    rt.write(this.b('rope'), ropeTablePacked(T, this.dims.D, cfg.rope_theta));
    this.gradStore = this.plan.grads;
    const b = (k: string) => this.b(k);
    this.g = new LinearGemms(rt, this.plan, b, this.forward, this.probePoints, plan.linearNnMinRows);
    this.lora = plan.lora ? new LoraGemms(rt, plan.lora, this.dims, b, plan.training) : null;
    const { tp, tpRank } = this.plan.wire;
    this.tp = !tp ? null
      : tpRank === undefined ? new TpSim(rt, this.dims, tp, b)
        : new TpPeer(rt, this.dims, tp, tpRank, this.layout, b);
    this.buildForward();
    if (this.training) {
      if (plan.lossScale) rt.write(this.b('lossScale'), new Uint8Array(packLossScaleState(new LossScaler(plan.lossScale).state())));
      buildBackward({
        rt, cfg, dims: this.dims, plan: this.plan, tp: this.tp, g: this.g, lora: this.lora, attnDqPath: opts.attnDqPath, f16Attention: opts.f16Attention, attnPaths: this.attnPaths,
        b, param: (name) => this.param(name), saved: (l, key) => this.saved(l, key), loadSaved: (l, key) => this.loadSaved(l, key),
        gradOut: (name) => this.gradOut(name), storeGrad: (name) => this.storeGrad(name),
        recompute: (l) => {
          const ds: Dispatch[] = [];
          this.buildLayer(l, (d) => (Array.isArray(d) ? ds.push(...d) : ds.push(d)), true);
          return ds;
        },
      }, this.backward, this.gradFinal);
      this.buildOptimizer();
    }
    // Shared weights are already written by their owner.
    if (opts.sharedWeights) this.baseChanged();
  }

  b(key: string): GPUBuffer {
    const x = this.buf.get(key);
    if (!x) throw new Error(`no buffer ${key}`);
    return x;
  }

  /** A parameter (or its gradient) as a binding slice of the flat buffer. */
  param(name: string, which: 'weights' | 'grads' = 'weights'): Binding {
    // QLoRA: `weights` holds the dense tensors only (the block linears are codes: LinearGemms.qbase).
    const v = (which === 'weights' && this.plan.qlora ? this.plan.qlora.dense : this.layout).byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return { buffer: this.b(which), offset: v.offset * 4, size: v.size * 4 };
  }

  /** The fp32 binding of a layer's saved tensor: its own buffer, or the shared live copy when stored quantized. */
  saved(l: number, key: LayerSavedKey): GPUBuffer {
    return this.storage[l][key] ? this.live(key) : this.b(savedKey(l, key, this.dims.L, this.plan.checkpoint));
  }

  /**
   * Dispatches that quantize the live copy of (l, key) into its codes (nothing when fp32, or when
   * the producer already wrote them there as the forward GEMM's X: LinearGemms.producerStored).
   */
  private storeSaved(l: number, key: LayerSavedKey): Dispatch[] {
    const st = this.storage[l][key];
    if (!st) return [];
    // gate's and up's f16 storage: the SwiGLU writes it (plan.swigluHalf).
    if ((key === 'gate' || key === 'up') && this.plan.swigluHalf[l]) return [];
    // An f16 cell that is an operand copy: nothing where its producer wrote it (LinearGemms.cellOut), else the copy's cast.
    if (this.f16Cell(l, key)) {
      if (this.g.cellWritten(l, key)) return [];
      return packF16Cell(this.rt, { label: `L${l}.${key}.f16`, x: this.live(key), cell: this.b(`L${l}.${key}.codes`), n: st.n, twin: !!this.plan.f16Twin });
    }
    // bf16/f16 keep no probe point: the quantization-error probe reads codes + scales (train/probe.ts probeSites skips them too).
    if (isHalf(st)) return packHalf(this.rt, st.format, { label: `L${l}.${key}.${st.format}`, x: this.live(key), words: this.b(`L${l}.${key}.codes`), n: st.n });
    const words = this.b(`L${l}.${key}.codes`);
    const scales = this.b(`L${l}.${key}.scales`);
    const ds = l < this.dims.L && this.g.producerStored(l, key) ? []
      : buildQuantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n }, this.live(key), { words, scales }).dispatches;
    const after = ds.length ? ds[ds.length - 1] : this.forward[this.forward.length - 1];
    this.probePoints.set(`L${l}.${key}`, { after, x: this.live(key), n: st.n, stored: { storage: st, words, scales } });
    return ds;
  }

  /**
   * Dispatches that dequantize rows [r0, r0 + rows) of (l, key) ([N, width]) back into the same rows
   * of its live copy (the LM head's chunks: plan/logits.ts aligned them); all rows: loadSaved.
   */
  private loadSavedRows(l: number, key: LayerSavedKey, width: number, r0: number, rows: number): Dispatch[] {
    const st = this.storage[l][key];
    if (!st) return [];
    if (rows === this.dims.N) return this.loadSaved(l, key);
    if (this.f16Cell(l, key)) throw new Error(`internal: L${l}.${key} is an f16 operand cell, unpacked whole only`);
    const out = { buffer: this.live(key), offset: r0 * width * 4, size: rows * width * 4 };
    const label = `L${l}.${key}.rows${r0}`;
    if (isHalf(st)) return unpackHalfRows(this.rt, st.format, { label, words: this.b(`L${l}.${key}.codes`), width, r0, rows, out });
    return [dequantizeRows(this.rt, label, st, width, r0, rows, this.b(`L${l}.${key}.codes`), this.b(`L${l}.${key}.scales`), out)];
  }

  /** Dispatches that dequantize (l, key) back into its live copy before backward reads it. */
  private loadSaved(l: number, key: LayerSavedKey): Dispatch[] {
    const st = this.storage[l][key];
    if (!st) return [];
    if (this.f16Cell(l, key)) {
      return unpackF16Cell(this.rt, { label: `L${l}.${key}.f16`, cell: this.b(`L${l}.${key}.codes`), out: this.live(key), n: st.n, twin: !!this.plan.f16Twin });
    }
    if (isHalf(st)) return unpackHalf(this.rt, st.format, { label: `L${l}.${key}.${st.format}`, words: this.b(`L${l}.${key}.codes`), out: this.live(key), n: st.n });
    return buildDequantize(this.rt, { format: st.format, granularity: st.granularity, n: st.n },
      this.b(`L${l}.${key}.codes`), this.b(`L${l}.${key}.scales`), { out: this.live(key) }).dispatches;
  }

  /** The shared fp32 live copy of a stored tensor: LIVE_ALIAS's scratch or its own, an f16 cell's where the plan moves it (plan.f16Live). */
  private live(key: LayerSavedKey): GPUBuffer {
    return this.b(this.plan.f16Live[key] ?? liveKey(key));
  }

  /** Whether layer l's saved `key` is an f16 cell that is also an f16 operand copy (plan.f16Cells). */
  private f16Cell(l: number, key: LayerSavedKey): boolean {
    return l < this.dims.L && this.plan.f16Cells[l].has(key);
  }

  /** The kernel each layer's forward, dX and dW GEMMs run on this device (fp32, int8-dot4, int8-tensor-core). */
  computePaths(): LayerPaths[] {
    return this.g.computePaths(this.attnPaths);
  }

  /** The INT8 dW GEMMs that run split over K (label → slices); the paths stay as computePaths says. */
  gemmSplits(): ReadonlyMap<string, number> {
    return this.g.gemmSplits();
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
    for (const { label, setSeed } of this.g.srKernels) setSeed(deriveSeed(step, label));
    this.lora?.setStepSeed(step);
  }

  /** What the optimizer trains: every parameter (the model's flat buffers), or only the LoRA adapters. */
  get trainable(): { layout: ParamLayout; weights: string; grads: string; m: string; v: string } {
    return this.plan.lora
      ? { layout: this.plan.lora.layout, weights: 'lora.weights', grads: 'lora.grads', m: 'lora.m', v: 'lora.v' }
      : { layout: this.layout, weights: 'weights', grads: 'grads', m: 'adam.m', v: 'adam.v' };
  }

  /** The trainable tensors' flat buffer `which` (trainable's layout). */
  readTrainable(which: 'weights' | 'grads' | 'm' | 'v'): Promise<Float32Array> {
    const t = this.trainable;
    return this.rt.readF32(this.b(t[which]), 0, t.layout.totalFloats);
  }

  /** Writes the trainable tensors' flat buffer `which` (trainable's layout). */
  writeTrainable(which: 'weights' | 'm' | 'v', flat: Float32Array): void {
    const t = this.trainable;
    if (flat.length !== t.layout.totalFloats) throw new Error(`${t[which]} has ${t.layout.totalFloats} floats, got ${flat.length}`);
    this.rt.write(this.b(t[which]), flat);
  }

  private lmHead(): string {
    return this.cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  }

  private buildForward(): void {
    const { rt, cfg } = this;
    const { N, C, V, L } = this.dims;
    const eps = cfg.rms_norm_eps;
    const f = this.forward;
    const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? f.push(...d) : f.push(d));
    // The INT8 GEMMs' weight codes for this step (plan.weightCodes 'per-step') and the f16 GEMMs' weight
    // copies, from the weights as the last AdamW left them; a frozen base's (LoRA) only change on upload.
    const derived = [...this.g.weightCodes(), ...this.g.f16WeightCasts()];
    if (this.plan.lora) this.baseDerive.push(...derived);
    else push(derived);
    if (this.plan.fakeQuant.weights) {
      // Fake-quantized weights for this step's GEMMs, per output channel (row of W [out, in]).
      push(copy(rt, { label: 'wq', src: this.b('weights'), dst: this.b('wq'), n: this.layout.totalFloats }));
      for (let l = 0; l < L; l++) {
        const spec = this.plan.layers[l].weights;
        if (isFp32(spec)) continue;
        for (const name of LINEAR) {
          const v = this.layout.byName.get(`model.layers.${l}.${name}.weight`)!;
          const wq = { buffer: this.b('wq'), offset: v.offset * 4, size: v.size * 4 };
          push(this.g.fakeQuant(`L${l}.${name}.wq`, wq, v.size, v.shape[1], spec));
          this.probePoints.set(`L${l}.${name}.wq`, { after: f[f.length - 1], x: this.param(`model.layers.${l}.${name}.weight`), xhat: wq, n: v.size });
        }
      }
    }
    push(embeddingForward(rt, { label: 'embed', ids: this.b('ids'), W: this.param('model.embed_tokens.weight'), out: this.saved(0, 'xIn'), dims: { N, V, C } }));
    for (let l = 0; l < L; l++) this.buildLayer(l, push);
    push(this.storeSaved(L, 'xFinal'));
    push(rmsnormForward(rt, { label: 'normF', x: this.saved(L, 'xFinal'), w: this.param('model.norm.weight'), y: this.saved(L, 'hF'), rstd: this.b('rstdF'), dims: { N, C, eps } }));
    push(this.storeSaved(L, 'hF'));
    this.bodyEnd = f.length;
    this.buildHead();
  }

  /**
   * The LM head, its loss and (training) its backward, a chunk of plan.logitsRows tokens at a time
   * (lm-head.ts): the training forward's end, and evaluation's loss-only twin.
   */
  private buildHead(): void {
    const { L, C } = this.dims;
    const name = this.lmHead();
    // A frozen head (LoRA) has no dW; a trained one's is read back from hF as stored (dequantized a chunk of rows at a time).
    const dw = this.training && !this.plan.lora ? {
      out: this.gradOut(name),
      load: (r0: number, rows: number) => this.loadSavedRows(L, 'hF', C, r0, rows),
      gemm: (args: Parameters<LinearGemms['dwMatmul']>[0]) => this.g.dwMatmul(args, 'dq'),
    } : undefined;
    const head = buildLmHead({
      rt: this.rt, dims: this.dims, rows: this.plan.logitsRows, hF: this.saved(L, 'hF'), w: this.param(name),
      logits: this.b('logits'), targets: this.b('targets'), losses: this.b('losses'), loss: this.b('loss'), ceWs: this.b('ceWs'),
      train: this.training ? {
        dx: this.b('dh'), lossScale: this.plan.lossScale ? this.b('lossScale') : undefined, dw,
        // dq is free here (dW's split-K workspace just before): the dX GEMM may split over the vocabulary too.
        dxGemm: (args) => this.g.dwMatmul(args, 'dq'),
      } : undefined,
    });
    this.logitsChunks = head.chunks;
    const body = this.forward.slice(0, this.bodyEnd);
    this.lossForward.push(...body, ...head.loss);
    if (!head.train) {
      this.forward.push(...head.loss);
      return;
    }
    this.forward.push(...head.train);
    // Tied embeddings collect the embedding's gradient on top (buildBackward stores it); an untied head's is final here, before any backward dispatch.
    if (dw && !this.cfg.tie_word_embeddings) {
      this.forward.push(...this.storeGrad(name));
      this.gradFinal.set(name, 0);
    }
  }

  /**
   * Layer l's forward. `recompute`: activation checkpointing's re-run at the start of the layer's
   * backward (plan.checkpoint): the same dispatches from the layer's saved input up to the SwiGLU,
   * refilling the shared set its backward reads; no down projection, no storage, no probes.
   */
  private buildLayer(l: number, push: (d: Dispatch | Dispatch[]) => void, recompute = false): void {
    const { rt, cfg } = this;
    const { B, T, N, C, F, nH, nKV, D, QC, KVC, L } = this.dims;
    const eps = cfg.rms_norm_eps;
    const p = (s: string) => this.param(`model.layers.${l}.${s}`);
    const a = (s: LayerSavedKey) => this.saved(l, s);
    const lab = (s: string) => `L${l}.${s}`;
    const next = l + 1 < L ? this.saved(l + 1, 'xIn') : this.saved(L, 'xFinal');
    // A recompute stores and probes nothing: the checkpointed plan keeps these tensors fp32 (checkpointProblem).
    const store = (k: LayerSavedKey) => { if (!recompute) push(this.storeSaved(l, k)); };
    store('xIn');
    // The residual copy xMid = xIn by the norm: xIn is dead after this (its live copy may be qRaw, written next).
    push(this.g.inputNorm(l, 'h1', { label: lab('norm1'), x: a('xIn'), w: p('input_layernorm.weight'), y: a('h1'), rstd: a('rstd1'), dims: { N, C, eps }, resid: a('xMid') }));
    store('h1');
    // A base linear, with its LoRA adapter around it where it has one (x: the fp32 input the adapter reads, or
    // its f16 cell, written by now, where the adapter reads cells: PEFT's autocast runs A on the f16 input too);
    // its up-projection in the base GEMM's epilogue where that GEMM takes one (lowRankFits), else a GEMM after it.
    const linear = (label: string, name: string, x: GPUBuffer, gx: Binding, out: GPUBuffer, n: number, k: number, acc: boolean, key: GemmInputSaved, via?: GPUBuffer) => {
      const ad = this.lora?.on(`model.layers.${l}.${name}`);
      const fused = ad && this.lora!.epilogue && this.g.lowRankFits(l, 'forward', name) ? this.lora!.upLowRank(ad) : undefined;
      if (ad) push(this.lora!.down(ad, label, (this.lora!.readsCells ? this.g.loraX(l, key) : undefined) ?? x, recompute));
      push(this.g.linear(label, l, name, gx, out, N, n, k, acc, key, fused, via));
      if (ad && !fused) push(this.lora!.up(ad, label, { buffer: out, offset: 0, size: N * n * 4 }));
    };
    const h1 = this.g.gemmInput(l, lab('qkv_in'), a('h1'), C, push, true, 'h1');
    linear(lab('q_proj'), 'self_attn.q_proj.weight', a('h1'), h1, this.b('qRaw'), QC, C, false, 'h1');
    linear(lab('k_proj'), 'self_attn.k_proj.weight', a('h1'), h1, this.b('kRaw'), KVC, C, false, 'h1');
    linear(lab('v_proj'), 'self_attn.v_proj.weight', a('h1'), h1, a('v'), KVC, C, false, 'h1');
    // INT8 attention scores: the rotations write Q's and K's codes too (attention-scores.ts).
    const i8Scores = this.plan.layers[l].compute.attentionQk === 'int8';
    // f16 attention reads f16 copies of q, k, v: their f16 cells where the plan has them (f16Cells: the
    // rotations write q's and k's, v's store is its cast), else f16.qkv's slots (the rotations write q's and k's, v's is cast).
    const f16Attn = !i8Scores && this.plan.f16?.layers[l].attention === 'f16-tensor-core';
    const cells = this.f16Cell(l, 'q') ? { q: this.b(`L${l}.q.codes`), k: this.b(`L${l}.k.codes`), v: this.b(`L${l}.v.codes`) } : undefined;
    const qkv16 = f16Attn
      ? f16AttnInputBindings(this.buf.get('f16.qkv'), this.dims, !!this.plan.f16Twin, false, f16AttnQkvSlots(this.plan.f16?.layers, this.plan.f16Cells), cells)
      : undefined;
    if (qkv16 && cells) for (const k of ['q', 'k'] as const) this.g.cellOut(l, k);
    store('v');
    const ropeOf = (which: 'q' | 'k', x: GPUBuffer, y: GPUBuffer, nHeads: number) => {
      const args = { label: lab(`rope_${which}`), x, y, table: this.b('rope'), B, T, nHeads, D };
      if (qkv16) return ropeF16(rt, { ...args, y16: qkv16.out[which], y16Only: this.plan.f16Only[l].has(which) });
      return i8Scores ? ropeWithCodes(rt, (key) => this.b(key), which, args) : rope(rt, args);
    };
    push(ropeOf('q', this.b('qRaw'), a('q'), nH));
    store('q');
    push(ropeOf('k', this.b('kRaw'), a('k'), nKV));
    store('k');
    if (i8Scores) {
      const sc = forwardScoreCodes(rt, (key) => this.b(key), l, a('q'), a('k'), this.plan.dims, this.attnPaths);
      push(sc.dispatches);
      push(attentionForwardI8(rt, { label: lab('attn'), ...sc.codes, v: a('v'), o: a('o'), lse: a('lse'), B, T, nH, nKV, D }));
    } else if (qkv16) {
      // f16 operands on tensor cores (verified on this device); o and lse as the fp32 backward reads them,
      // and o's f16 copy where o_proj's GEMM runs f16 (attnOut).
      this.attnPaths.set(`L${l}.attn`, 'f16-tensor-core');
      if (!cells) push(castF16Operand(rt, { label: lab('v16'), x: a('v'), out: qkv16.out.v.out, n: N * KVC, elem: qkv16.in.elem }));
      const forced = this.f16Attention;
      push(attentionForwardF16(rt, {
        label: lab('attn'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), B, T, nH, nKV, D, o16: this.g.attnOut(l, a('o')), qkv16: qkv16.in,
        spec: forced?.forward, emulate: forced?.emulate,
      }));
    } else {
      push(attentionForward(rt, { label: lab('attn'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), B, T, nH, nKV, D, o16: this.g.attnOut(l, a('o')) }));
    }
    store('o');
    const oIn = this.g.gemmInput(l, lab('o_in'), a('o'), QC, push, false, 'o');
    // xMid = xIn + o·Woᵀ: the GEMM accumulates onto the residual copy.
    if (this.tp) push(this.tp.rowParallel(lab('o_proj.tp'), oIn, this.g.lin(l, 'self_attn.o_proj.weight'), QC, a('xMid')));
    else linear(lab('o_proj'), 'self_attn.o_proj.weight', a('o'), oIn, a('xMid'), C, QC, true, 'o');
    store('xMid');
    // next = xMid (down_proj accumulates onto it) by the norm where next is a buffer of its own; a stored
    // input's live copy (scratch) is copied right before down_proj. Not in a recompute (next is no business of it).
    const nextStored = l + 1 < L ? this.storage[l + 1].xIn : this.storage[L].xFinal;
    const residInNorm = !recompute && !nextStored;
    push(this.g.inputNorm(l, 'h2', { label: lab('norm2'), x: a('xMid'), w: p('post_attention_layernorm.weight'), y: a('h2'), rstd: a('rstd2'), dims: { N, C, eps }, resid: residInNorm ? next : undefined }));
    store('h2');
    const h2 = this.g.gemmInput(l, lab('mlp_in'), a('h2'), C, push, true, 'h2');
    linear(lab('gate_proj'), 'mlp.gate_proj.weight', a('h2'), h2, a('gate'), F, C, false, 'h2');
    store('gate');
    linear(lab('up_proj'), 'mlp.up_proj.weight', a('h2'), h2, a('up'), F, C, false, 'h2');
    store('up');
    push(this.g.inputSwiglu(l, { label: lab('swiglu'), gate: a('gate'), up: a('up'), h: a('act'), dims: { N, F } }));
    store('act');
    // The layer's backward reads nothing past here: a recompute leaves the next layer's input alone.
    if (recompute) return;
    const actIn = this.g.gemmInput(l, lab('down_in'), a('act'), F, push, true, 'act');
    if (!residInNorm) push(copy(rt, { label: lab('resid2'), src: a('xMid'), dst: next, n: N * C }));
    if (this.tp) push(this.tp.rowParallel(lab('down_proj.tp'), actIn, this.g.lin(l, 'mlp.down_proj.weight'), F, next));
    // dq (xMid's live copy where it has one) is dead from here to the backward: an fp32 GEMM accumulates through it (fp32Accumulate).
    else linear(lab('down_proj'), 'mlp.down_proj.weight', a('act'), actIn, next, C, F, true, 'act', this.buf.get('dq'));
  }

  private buildOptimizer(): void {
    const { rt } = this;
    const o = this.optimizer;
    // What trains: every parameter, or (LoRA) only the adapters, in their own flat buffers.
    const t = this.trainable;
    const n = t.layout.totalFloats;
    if (!this.gradStore) {
      o.push(...globalNorm(rt, { label: 'grad_norm', x: this.b(t.grads), n, partials: this.b('normPartials'), out: this.b('gradNorm') }));
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
    this.normEnd = o.length;
    // Loss scaling: found_inf and the unscaled norm from the scaled gradients' norm; AdamW then skips or unscales.
    const ls = this.plan.lossScale;
    const state = ls ? this.b('lossScale') : null;
    if (state) o.push(lossScaleCheck(rt, { label: 'grad_norm', gradNorm: this.b('gradNorm'), state }));
    const step = (a: { label: string; param: Binding; grad: Binding; m: Binding; v: Binding; n: number; decay: boolean }): Dispatch =>
      (state ? adamwScaled(rt, { ...a, stepParams: this.b('stepParams'), state }) : adamw(rt, { ...a, stepParams: this.b('stepParams'), gradNorm: this.b('gradNorm') }));
    // The study's optimizer: m ← Q(m), v ← Q(v) (per row of each tensor) before the full-precision update;
    // not on a step the loss scaler skips (the moments stay as they were, as AdamW leaves them).
    for (const [key, spec] of [[t.m, this.plan.adam.m], [t.v, this.plan.adam.v]] as const) {
      if (isFp32(spec)) continue;
      for (const v of t.layout.views) {
        const rowLength = v.shape.length > 1 ? v.shape[v.shape.length - 1] : v.size;
        o.push(...this.g.fakeQuant(`${key}.${v.name}`, { buffer: this.b(key), offset: v.offset * 4, size: v.size * 4 }, v.size, rowLength, spec, state ?? undefined));
      }
    }
    if (this.gradStore) {
      const sl = (k: string, v: { offset: number; size: number }): Binding => ({ buffer: this.b(k), offset: v.offset * 4, size: v.size * 4 });
      for (const v of this.layout.views) {
        o.push(...this.loadGrad(v.name));
        o.push(step({ label: `adamw.${v.name}`, param: sl('weights', v), grad: { buffer: this.b('gradStage'), offset: 0, size: v.size * 4 }, m: sl('adam.m', v), v: sl('adam.v', v), n: v.size, decay: v.decay }));
      }
    } else {
      for (const [range, decay] of [[t.layout.decayRange, true], [t.layout.noDecayRange, false]] as const) {
        const [s, e] = range;
        if (e <= s) continue;
        const sl = (k: string): Binding => ({ buffer: this.b(k), offset: s * 4, size: (e - s) * 4 });
        o.push(step({ label: decay ? 'adamw.decay' : 'adamw.nodecay', param: sl(t.weights), grad: sl(t.grads), m: sl(t.m), v: sl(t.v), n: e - s, decay }));
      }
    }
    if (state && ls) o.push(lossScaleUpdate(rt, { label: 'grad_norm', state, cfg: ls }));
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
    if (this.g.qbase) this.g.qbase.upload(flat, this.layout);
    else this.rt.write(this.b('weights'), flat);
    this.baseChanged();
  }

  /** Remakes a frozen base's derived copies after its fp32 weights were written (nothing when the base trains). */
  baseChanged(): void {
    if (this.baseDerive.length) this.rt.run(this.baseDerive);
  }

  /** A flat buffer in the full model's layout; QLoRA's `weights` come back with the linears dequantized (what the GEMMs compute with). */
  async readFlat(key: 'weights' | 'grads' | 'adam.m' | 'adam.v'): Promise<Float32Array> {
    if (key === 'weights' && this.g.qbase) return this.g.qbase.read(this.layout);
    return this.rt.readF32(this.b(key), 0, this.layout.totalFloats);
  }

  /** floatsHash (kernels/hash.ref.ts) of readFlat(key), computed on the GPU: one word read back. */
  hashFlat(key: 'weights' | 'grads' | 'adam.m' | 'adam.v'): Promise<number> {
    return hashBuffers(this.rt, `hash.${key}`, [{ buffer: this.b(key), words: this.layout.totalFloats }]);
  }

  /** The forward up to the LM head's input (hF): every saved activation and probe point, no logits. */
  get forwardBody(): Dispatch[] {
    return this.forward.slice(0, this.bodyEnd);
  }

  /** Forward without the loss kernels: the whole batch's logits in `logits` (tests, sampling). Only where they exist at once. */
  get forwardLogits(): Dispatch[] {
    if (this.logitsChunks > 1) {
      throw new Error(`the logits of ${this.dims.N} tokens exist ${this.plan.logitsRows} rows at a time (plan.logitsRows); build the model with logitsChunkRows: ${this.dims.N} to read them whole`);
    }
    return this.lossForward.slice(0, this.bodyEnd + 1);
  }

  /** The optimizer after the gradient norm: reads gradNorm as written by whoever computed it. */
  get optimizerUpdate(): Dispatch[] {
    return this.optimizer.slice(this.normEnd);
  }

  destroy(): void {
    this.g.qbase?.destroy();
    for (const [k, b] of this.buf) if (k !== 'weights' || this.ownsWeights) this.rt.mem.free(b);
    this.buf.clear();
    this.lora?.destroy();
  }
}
