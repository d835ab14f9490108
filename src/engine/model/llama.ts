/**
 * LLaMA on WebGPU: every buffer from one plan (so `--plan` and the allocator agree by construction),
 * and the whole training step — forward, loss, backward, global-norm clipping, AdamW — as one list of
 * dispatches built once and encoded into one command buffer per step.
 *
 * Shapes: B batch, T context, N = B·T tokens, C hidden, F intermediate, nH/nKV query/KV heads,
 * D head dim, V vocab, L layers. Activations are row-major [N, ·]; weights are HF [out, in].
 */
import type { MemCategory } from '../gpu/memory';
import { type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward } from '../kernels/attention';
import { crossEntropyForwardBackward, crossEntropyWorkspaceBytes } from '../kernels/crossentropy';
import { copy } from '../kernels/elementwise';
import { embeddingBackward, embeddingForward, embeddingWorkspaceBytes } from '../kernels/embedding';
import { matmul } from '../kernels/matmul';
import { globalNorm, globalNormPartialsBytes } from '../kernels/reduce';
import { rmsnormBackward, rmsnormForward, rmsnormWorkspaceBytes } from '../kernels/rmsnorm';
import { rope, ropeTablePacked } from '../kernels/rope';
import { swigluBackward, swigluForward } from '../kernels/swiglu';
import { adamw, ADAMW_STEP_BYTES } from '../optim/adamw';
import { headDim, type ModelConfig } from './config';
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
  /** false: the weights belong to another model (a B=1 sampler beside the trainer). */
  ownWeights?: boolean;
}

export interface ModelBuildOptions {
  training?: boolean;
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

/** Saved-for-backward tensors of one layer, in floats per token (the AGoQ schemes re-price these). */
export const LAYER_SAVED = ['xIn', 'rstd1', 'h1', 'q', 'k', 'v', 'o', 'lse', 'xMid', 'rstd2', 'h2', 'gate', 'up', 'act'] as const;

/** Every buffer the training step allocates, in bytes. The single source for allocation and `--plan`. */
export function modelBufferPlan(cfg: ModelConfig, B: number, T: number, opts: PlanOptions = {}): BufferSpec[] {
  const training = opts.training ?? true;
  const d = modelDims(cfg, B, T);
  const layout = paramLayout(cfg);
  const f = 4;
  const P = layout.totalFloats * f;
  const out: BufferSpec[] = [];
  if (opts.ownWeights ?? true) out.push({ key: 'weights', category: 'weights', bytes: P });
  if (training) {
    out.push({ key: 'grads', category: 'grads', bytes: P });
    out.push({ key: 'adam.m', category: 'optimizer', bytes: P }, { key: 'adam.v', category: 'optimizer', bytes: P });
  }
  const act = (key: string, floats: number) => out.push({ key, category: 'activations', bytes: floats * f });
  const ws = (key: string, bytes: number) => out.push({ key, category: 'workspace', bytes });
  act('ids', d.N);
  for (let l = 0; l < d.L; l++) {
    const sizes: Record<(typeof LAYER_SAVED)[number], number> = {
      xIn: d.N * d.C, rstd1: d.N, h1: d.N * d.C, q: d.N * d.C, k: d.N * d.KVC, v: d.N * d.KVC, o: d.N * d.C,
      lse: d.B * d.nH * d.T, xMid: d.N * d.C, rstd2: d.N, h2: d.N * d.C, gate: d.N * d.F, up: d.N * d.F, act: d.N * d.F,
    };
    for (const k of LAYER_SAVED) act(`L${l}.${k}`, sizes[k]);
  }
  act('xFinal', d.N * d.C);
  act('rstdF', d.N);
  act('hF', d.N * d.C);
  act('logits', d.N * d.V); // becomes dlogits in place
  ws('targets', d.N * f);
  ws('qRaw', d.N * d.C * f);
  ws('kRaw', d.N * d.KVC * f);
  ws('losses', d.N * f);
  ws('loss', 16);
  ws('ceWs', crossEntropyWorkspaceBytes());
  // Loss and gradient norm come back through this small mappable buffer once per step.
  out.push({ key: 'readback', category: 'workspace', bytes: 16, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  ws('rope', 2 * d.T * (d.D / 2) * f);
  if (training) {
    ws('dres', d.N * d.C * f);
    ws('dh', d.N * d.C * f);
    ws('dF1', d.N * d.F * f);
    ws('dF2', d.N * d.F * f);
    ws('dF3', d.N * d.F * f);
    ws('dq', d.N * d.C * f);
    ws('dk', d.N * d.KVC * f);
    ws('dv', d.N * d.KVC * f);
    ws('attnWs', attentionBackwardWorkspaceBytes(d.B, d.T, d.nH));
    ws('normWs', rmsnormWorkspaceBytes({ N: d.N, C: d.C }));
    ws('embedWs', embeddingWorkspaceBytes({ N: d.N, V: d.V }));
    ws('normPartials', globalNormPartialsBytes(layout.totalFloats));
    ws('gradNorm', 16);
    out.push({ key: 'stepParams', category: 'workspace', bytes: ADAMW_STEP_BYTES, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
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

  constructor(readonly rt: Runtime, readonly cfg: ModelConfig, B: number, T: number, opts: ModelBuildOptions = {}) {
    if (T > cfg.max_position_embeddings) {
      throw new Error(`context ${T} exceeds max_position_embeddings ${cfg.max_position_embeddings}`);
    }
    this.training = opts.training ?? true;
    this.layout = paramLayout(cfg);
    this.dims = modelDims(cfg, B, T);
    for (const s of modelBufferPlan(cfg, B, T, { training: this.training, ownWeights: !opts.sharedWeights })) this.buf.set(s.key, rt.createBuffer(s.category, s.key, s.bytes, s.usage));
    if (opts.sharedWeights) this.buf.set('weights', opts.sharedWeights);
    this.ownsWeights = !opts.sharedWeights;
    const training = this.training;
    rt.write(this.b('rope'), ropeTablePacked(T, this.dims.D, cfg.rope_theta));
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

  private lmHead(): string {
    return this.cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  }

  private buildForward(): void {
    const { rt, cfg } = this;
    const { B, T, N, C, F, nH, nKV, D, KVC, V, L } = this.dims;
    const eps = cfg.rms_norm_eps;
    const f = this.forward;
    const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? f.push(...d) : f.push(d));
    push(embeddingForward(rt, { label: 'embed', ids: this.b('ids'), W: this.param('model.embed_tokens.weight'), out: this.b('L0.xIn'), dims: { N, V, C } }));
    for (let l = 0; l < L; l++) {
      const p = (s: string) => this.param(`model.layers.${l}.${s}`);
      const a = (s: string) => this.b(`L${l}.${s}`);
      const lab = (s: string) => `L${l}.${s}`;
      const next = l + 1 < L ? this.b(`L${l + 1}.xIn`) : this.b('xFinal');
      push(rmsnormForward(rt, { label: lab('norm1'), x: a('xIn'), w: p('input_layernorm.weight'), y: a('h1'), rstd: a('rstd1'), dims: { N, C, eps } }));
      push(matmul(rt, { label: lab('q_proj'), a: a('h1'), b: p('self_attn.q_proj.weight'), c: this.b('qRaw'), M: N, N: C, K: C, transB: true }));
      push(matmul(rt, { label: lab('k_proj'), a: a('h1'), b: p('self_attn.k_proj.weight'), c: this.b('kRaw'), M: N, N: KVC, K: C, transB: true }));
      push(matmul(rt, { label: lab('v_proj'), a: a('h1'), b: p('self_attn.v_proj.weight'), c: a('v'), M: N, N: KVC, K: C, transB: true }));
      push(rope(rt, { label: lab('rope_q'), x: this.b('qRaw'), y: a('q'), table: this.b('rope'), B, T, nHeads: nH, D }));
      push(rope(rt, { label: lab('rope_k'), x: this.b('kRaw'), y: a('k'), table: this.b('rope'), B, T, nHeads: nKV, D }));
      push(attentionForward(rt, { label: lab('attn'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), B, T, nH, nKV, D }));
      // Residual: xMid = xIn + o·Woᵀ (copy, then a GEMM that accumulates).
      push(copy(rt, { label: lab('resid1'), src: a('xIn'), dst: a('xMid'), n: N * C }));
      push(matmul(rt, { label: lab('o_proj'), a: a('o'), b: p('self_attn.o_proj.weight'), c: a('xMid'), M: N, N: C, K: C, transB: true, accumulate: true }));
      push(rmsnormForward(rt, { label: lab('norm2'), x: a('xMid'), w: p('post_attention_layernorm.weight'), y: a('h2'), rstd: a('rstd2'), dims: { N, C, eps } }));
      push(matmul(rt, { label: lab('gate_proj'), a: a('h2'), b: p('mlp.gate_proj.weight'), c: a('gate'), M: N, N: F, K: C, transB: true }));
      push(matmul(rt, { label: lab('up_proj'), a: a('h2'), b: p('mlp.up_proj.weight'), c: a('up'), M: N, N: F, K: C, transB: true }));
      push(swigluForward(rt, { label: lab('swiglu'), gate: a('gate'), up: a('up'), h: a('act'), dims: { N, F } }));
      push(copy(rt, { label: lab('resid2'), src: a('xMid'), dst: next, n: N * C }));
      push(matmul(rt, { label: lab('down_proj'), a: a('act'), b: p('mlp.down_proj.weight'), c: next, M: N, N: C, K: F, transB: true, accumulate: true }));
    }
    push(rmsnormForward(rt, { label: 'normF', x: this.b('xFinal'), w: this.param('model.norm.weight'), y: this.b('hF'), rstd: this.b('rstdF'), dims: { N, C, eps } }));
    push(matmul(rt, { label: 'lm_head', a: this.b('hF'), b: this.param(this.lmHead()), c: this.b('logits'), M: N, N: V, K: C, transB: true }));
    this.logitsEnd = f.length;
    // Fused CE forward+backward: per-row losses, their mean, and dlogits in place of the logits.
    const logits = this.b('logits');
    push(crossEntropyForwardBackward(rt, { label: 'xent', logits, dlogits: logits, targets: this.b('targets'), losses: this.b('losses'), loss: this.b('loss'), workspace: this.b('ceWs'), dims: { N, V } }));
  }

  private buildBackward(): void {
    const { rt } = this;
    const { B, T, N, C, F, nH, nKV, D, KVC, V, L } = this.dims;
    const eps = this.cfg.rms_norm_eps;
    const g = this.backward;
    const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? g.push(...d) : g.push(d));
    const gp = (name: string) => this.param(name, 'grads');
    const dlogits = this.b('logits');
    const dh = this.b('dh');
    const dres = this.b('dres');
    const normWs = this.b('normWs');
    push(matmul(rt, { label: 'lm_head.dx', a: dlogits, b: this.param(this.lmHead()), c: dh, M: N, N: C, K: V }));
    push(matmul(rt, { label: 'lm_head.dw', a: dlogits, b: this.b('hF'), c: gp(this.lmHead()), M: V, N: C, K: N, transA: true }));
    push(rmsnormBackward(rt, { label: 'normF.bwd', x: this.b('xFinal'), w: this.param('model.norm.weight'), rstd: this.b('rstdF'), dy: dh, dx: dres, dw: gp('model.norm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: false }));
    for (let l = L - 1; l >= 0; l--) {
      const p = (s: string) => this.param(`model.layers.${l}.${s}`);
      const gr = (s: string) => gp(`model.layers.${l}.${s}`);
      const a = (s: string) => this.b(`L${l}.${s}`);
      const lab = (s: string) => `L${l}.${s}`;
      // MLP: dact = dres·Wdown, dWdown = dresᵀ·act, then SwiGLU, then gate/up.
      push(matmul(rt, { label: lab('down.dx'), a: dres, b: p('mlp.down_proj.weight'), c: this.b('dF1'), M: N, N: F, K: C }));
      push(matmul(rt, { label: lab('down.dw'), a: dres, b: a('act'), c: gr('mlp.down_proj.weight'), M: C, N: F, K: N, transA: true }));
      push(swigluBackward(rt, { label: lab('swiglu.bwd'), gate: a('gate'), up: a('up'), dh: this.b('dF1'), dgate: this.b('dF2'), dup: this.b('dF3'), dims: { N, F } }));
      push(matmul(rt, { label: lab('gate.dx'), a: this.b('dF2'), b: p('mlp.gate_proj.weight'), c: dh, M: N, N: C, K: F }));
      push(matmul(rt, { label: lab('up.dx'), a: this.b('dF3'), b: p('mlp.up_proj.weight'), c: dh, M: N, N: C, K: F, accumulate: true }));
      push(matmul(rt, { label: lab('gate.dw'), a: this.b('dF2'), b: a('h2'), c: gr('mlp.gate_proj.weight'), M: F, N: C, K: N, transA: true }));
      push(matmul(rt, { label: lab('up.dw'), a: this.b('dF3'), b: a('h2'), c: gr('mlp.up_proj.weight'), M: F, N: C, K: N, transA: true }));
      push(rmsnormBackward(rt, { label: lab('norm2.bwd'), x: a('xMid'), w: p('post_attention_layernorm.weight'), rstd: a('rstd2'), dy: dh, dx: dres, dw: gr('post_attention_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true }));
      // Attention: dO = dres·Wo (into dh, free again), dWo = dresᵀ·o.
      push(matmul(rt, { label: lab('o.dx'), a: dres, b: p('self_attn.o_proj.weight'), c: dh, M: N, N: C, K: C }));
      push(matmul(rt, { label: lab('o.dw'), a: dres, b: a('o'), c: gr('self_attn.o_proj.weight'), M: C, N: C, K: N, transA: true }));
      push(attentionBackward(rt, { label: lab('attn.bwd'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), dO: dh, dq: this.b('dq'), dk: this.b('dk'), dv: this.b('dv'), workspace: this.b('attnWs'), B, T, nH, nKV, D }));
      // Undo RoPE on dq, dk (qRaw/kRaw are free during backward and hold the results).
      push(rope(rt, { label: lab('rope_q.bwd'), x: this.b('dq'), y: this.b('qRaw'), table: this.b('rope'), B, T, nHeads: nH, D, inverse: true }));
      push(rope(rt, { label: lab('rope_k.bwd'), x: this.b('dk'), y: this.b('kRaw'), table: this.b('rope'), B, T, nHeads: nKV, D, inverse: true }));
      push(matmul(rt, { label: lab('q.dx'), a: this.b('qRaw'), b: p('self_attn.q_proj.weight'), c: dh, M: N, N: C, K: C }));
      push(matmul(rt, { label: lab('k.dx'), a: this.b('kRaw'), b: p('self_attn.k_proj.weight'), c: dh, M: N, N: C, K: KVC, accumulate: true }));
      push(matmul(rt, { label: lab('v.dx'), a: this.b('dv'), b: p('self_attn.v_proj.weight'), c: dh, M: N, N: C, K: KVC, accumulate: true }));
      push(matmul(rt, { label: lab('q.dw'), a: this.b('qRaw'), b: a('h1'), c: gr('self_attn.q_proj.weight'), M: C, N: C, K: N, transA: true }));
      push(matmul(rt, { label: lab('k.dw'), a: this.b('kRaw'), b: a('h1'), c: gr('self_attn.k_proj.weight'), M: KVC, N: C, K: N, transA: true }));
      push(matmul(rt, { label: lab('v.dw'), a: this.b('dv'), b: a('h1'), c: gr('self_attn.v_proj.weight'), M: KVC, N: C, K: N, transA: true }));
      push(rmsnormBackward(rt, { label: lab('norm1.bwd'), x: a('xIn'), w: p('input_layernorm.weight'), rstd: a('rstd1'), dy: dh, dx: dres, dw: gr('input_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true }));
    }
    push(embeddingBackward(rt, { label: 'embed.bwd', ids: this.b('ids'), dout: dres, dW: gp('model.embed_tokens.weight'), workspace: this.b('embedWs'), dims: { N, V, C }, accumulate: this.cfg.tie_word_embeddings }));
  }

  private buildOptimizer(): void {
    const { rt } = this;
    const o = this.optimizer;
    const n = this.layout.totalFloats;
    o.push(...globalNorm(rt, { label: 'grad_norm', x: this.b('grads'), n, partials: this.b('normPartials'), out: this.b('gradNorm') }));
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
