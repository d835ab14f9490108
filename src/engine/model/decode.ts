/**
 * Generation with a KV cache: per layer K and V buffers [ctx, nKV, D] (GQA: the KV heads only).
 * A prompt is prefilled in one pass over ctx rows (positions past it are causal padding that later
 * tokens overwrite before anything reads them); then each token costs one position: embedding, per
 * layer rmsnorm, q/k/v for one row, RoPE at its position, K/V appended to the cache, one query's
 * attention over the cache, o_proj, MLP, and the logits, read back in the same submit.
 *
 * The weights are the model's fp32 flat buffer (any scheme: quantization is the training step's,
 * the stored weights stay fp32), usually shared with a trainer.
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { BUFFER_USAGE } from '../gpu/memory';
import { attentionForward } from '../kernels/attention/attention';
import { attend, gemv, ropeAt } from '../kernels/decode/decode';
import { embeddingForward } from '../kernels/embedding/embedding';
import { matmul } from '../kernels/matmul/matmul';
import { rmsnormForward } from '../kernels/rmsnorm/rmsnorm';
import { rope, ropeTablePacked } from '../kernels/rope/rope';
import { swigluForward } from '../kernels/swiglu/swiglu';
import type { ModelConfig } from './config';
import { type BufferSpec, type ModelDims, modelDims } from './dims';
import { flatten, type ParamLayout, paramLayout } from './params';
import { scale } from '../kernels/elementwise/elementwise';
import type { LoraPlan } from '../lora/plan';

/** LoRA adapters the decoder adds to the frozen base's linears: their plan and their weights (a trainer's lora.weights). */
export interface DecoderLora { plan: LoraPlan; weights: GPUBuffer }

/** Every buffer a decoder of context `ctx` allocates (the KV cache, prefill activations, logits). */
export function decoderBufferPlan(cfg: ModelConfig, ctx: number, lora?: LoraPlan | null): BufferSpec[] {
  const { C, F, nH, D, QC, KVC, V, L } = modelDims(cfg, 1, ctx);
  const f = 4;
  const out: BufferSpec[] = [];
  for (let l = 0; l < L; l++) {
    out.push({ key: `K${l}`, category: 'activations', bytes: ctx * KVC * f });
    out.push({ key: `V${l}`, category: 'activations', bytes: ctx * KVC * f });
  }
  // Prefill runs ctx rows; a decode step uses row 0 of the same buffers.
  out.push(
    { key: 'x', category: 'activations', bytes: ctx * C * f },
    { key: 'h', category: 'activations', bytes: ctx * C * f },
    { key: 'q', category: 'activations', bytes: ctx * QC * f },
    // The prefill's k before RoPE, and a decode step's q or k before RoPE.
    { key: 'raw', category: 'activations', bytes: Math.max(ctx * KVC, QC) * f },
    { key: 'o', category: 'activations', bytes: ctx * QC * f },
    { key: 'gate', category: 'activations', bytes: ctx * F * f },
    { key: 'up', category: 'activations', bytes: ctx * F * f },
    { key: 'lse', category: 'activations', bytes: ctx * nH * f },
    { key: 'rstd', category: 'activations', bytes: ctx * f },
    { key: 'ids', category: 'activations', bytes: ctx * f },
    { key: 'step', category: 'activations', bytes: 2 * f },
    { key: 'logits', category: 'activations', bytes: V * f },
    { key: 'rope', category: 'workspace', bytes: ctx * D * f },
    { key: 'logitsRead', category: 'workspace', bytes: V * f, usage: BUFFER_USAGE.MAP_READ | BUFFER_USAGE.COPY_DST },
  );
  // LoRA adapters' x·Aᵀ for ctx rows (engine/lora).
  if (lora) out.push({ key: 'lora.u', category: 'workspace', bytes: ctx * lora.spec.rank * f });
  return out;
}

/**
 * The context a decoder holds unless told otherwise: the model's max_position_embeddings, at most
 * this (an imported model may allow 128K positions, whose cache would not fit).
 */
export const DEFAULT_DECODE_CTX = 2048;

export function defaultDecodeCtx(cfg: ModelConfig): number {
  return Math.min(cfg.max_position_embeddings, DEFAULT_DECODE_CTX);
}

export class Decoder {
  readonly dims: ModelDims;
  readonly layout: ParamLayout;
  private readonly buf = new Map<string, GPUBuffer>();
  private readonly prefillPass: Dispatch[];
  private readonly stepPass: Dispatch[];
  private pos = 0;
  /** Weights this decoder uploaded itself (withParams), freed with it. */
  private ownWeights: GPUBuffer | null = null;

  /** A decoder over its own copy of `params` (a checkpoint, an imported model). */
  static withParams(rt: Runtime, cfg: ModelConfig, params: Map<string, Float32Array>, ctx = defaultDecodeCtx(cfg)): Decoder {
    const weights = rt.upload('weights', 'decoder.weights', flatten(params, paramLayout(cfg)));
    try {
      const d = new Decoder(rt, cfg, weights, ctx);
      d.ownWeights = weights;
      return d;
    } catch (e) {
      rt.mem.free(weights);
      throw e;
    }
  }

  /** `ctx`: positions the cache holds (default max_position_embeddings). */
  constructor(readonly rt: Runtime, readonly cfg: ModelConfig, private readonly weights: GPUBuffer, readonly ctx = cfg.max_position_embeddings,
    private readonly lora: DecoderLora | null = null) {
    if (!Number.isInteger(ctx) || ctx < 1) throw new Error(`decoder context must be an integer ≥ 1, got ${ctx}`);
    if (ctx > cfg.max_position_embeddings) throw new Error(`context ${ctx} exceeds max_position_embeddings ${cfg.max_position_embeddings}`);
    this.dims = modelDims(cfg, 1, ctx);
    this.layout = paramLayout(cfg);
    if (weights.size < this.layout.totalFloats * 4) throw new Error(`decoder: weights buffer has ${weights.size} bytes, the model needs ${this.layout.totalFloats * 4}`);
    if (lora && lora.weights.size < lora.plan.layout.totalFloats * 4) throw new Error('decoder: the LoRA weights buffer is smaller than its layout');
    for (const s of decoderBufferPlan(cfg, ctx, lora?.plan)) this.buf.set(s.key, rt.createBuffer(s.category, `decoder.${s.key}`, s.bytes, s.usage));
    rt.write(this.b('rope'), ropeTablePacked(ctx, this.dims.D, cfg.rope_theta));
    this.prefillPass = this.build(ctx);
    this.stepPass = this.build(1);
  }

  /** Tokens in the cache: the position the next step() writes. */
  get length(): number {
    return this.pos;
  }

  private b(key: string): GPUBuffer {
    const x = this.buf.get(key);
    if (!x) throw new Error(`decoder: no buffer ${key}`);
    return x;
  }

  private w(name: string): { buffer: GPUBuffer; offset: number; size: number } {
    const v = this.layout.byName.get(name);
    if (!v) throw new Error(`decoder: no parameter ${name}`);
    return { buffer: this.weights, offset: v.offset * 4, size: v.size * 4 };
  }

  private lw(name: string): { buffer: GPUBuffer; offset: number; size: number } {
    const v = this.lora!.plan.layout.byName.get(name)!;
    return { buffer: this.lora!.weights, offset: v.offset * 4, size: v.size * 4 };
  }

  /**
   * The forward over M rows: M = ctx is the prefill (GEMMs, the causal attention, K and V written
   * whole into the cache), M = 1 a decode step at position step[1] (GEMVs, attention over the cache).
   */
  private build(M: number): Dispatch[] {
    const { rt, cfg } = this;
    const { C, F, nH, nKV, D, QC, KVC, V, L } = this.dims;
    const ctx = this.ctx;
    const eps = cfg.rms_norm_eps;
    const one = M === 1;
    const step = this.b('step');
    const x = this.b('x');
    const h = this.b('h');
    const out: Dispatch[] = [];
    const linear = (label: string, name: string, a: GPUBuffer, c: GPUBuffer, N: number, K: number, o: { accumulate?: boolean; atPos?: boolean } = {}) => {
      out.push(one
        ? gemv(rt, { label, x: a, w: this.w(name), y: c, step, N, K, ...o })
        : matmul(rt, { label, a, b: this.w(name), c, M, N, K, transB: true, accumulate: o.accumulate }));
      const ad = this.lora?.plan.byBase.get(name);
      if (!ad) return;
      // y += s·(x·Aᵀ)·Bᵀ after the base product (PEFT's unmerged forward).
      const r = this.lora!.plan.spec.rank;
      const u = { buffer: this.b('lora.u'), offset: 0, size: M * r * 4 };
      const sc = this.lora!.plan.scale;
      if (one) {
        out.push(gemv(rt, { label: `${label}.lora_A`, x: a, w: this.lw(ad.a), y: u, step, N: r, K }));
        out.push(scale(rt, { label: `${label}.lora_s`, out: u, alpha: sc, n: r }));
        out.push(gemv(rt, { label: `${label}.lora_B`, x: u, w: this.lw(ad.b), y: c, step, N, K: r, accumulate: true, atPos: o.atPos }));
      } else {
        out.push(matmul(rt, { label: `${label}.lora_A`, a, b: this.lw(ad.a), c: u, M, N: r, K, transB: true }));
        out.push(matmul(rt, { label: `${label}.lora_B`, a: u, b: this.lw(ad.b), c, M, N, K: r, transB: true, accumulate: true, alpha: sc }));
      }
    };
    out.push(embeddingForward(rt, { label: 'dec.embed', ids: one ? step : this.b('ids'), W: this.w('model.embed_tokens.weight'), out: x, dims: { N: M, V, C } }));
    for (let l = 0; l < L; l++) {
      const p = (s: string) => `model.layers.${l}.${s}`;
      const lab = (s: string) => `dec.L${l}.${s}`;
      const [kc, vc, q, raw] = [this.b(`K${l}`), this.b(`V${l}`), this.b('q'), this.b('raw')];
      out.push(rmsnormForward(rt, { label: lab('norm1'), x, w: this.w(p('input_layernorm.weight')), y: h, rstd: this.b('rstd'), dims: { N: M, C, eps } }));
      if (one) {
        const table = this.b('rope');
        linear(lab('q_proj'), p('self_attn.q_proj.weight'), h, raw, QC, C);
        out.push(ropeAt(rt, { label: lab('rope_q'), x: raw, y: q, table, step, H: nH, D, tableT: ctx }));
        linear(lab('k_proj'), p('self_attn.k_proj.weight'), h, raw, KVC, C);
        out.push(ropeAt(rt, { label: lab('rope_k'), x: raw, y: kc, table, step, H: nKV, D, tableT: ctx, atPos: true }));
        linear(lab('v_proj'), p('self_attn.v_proj.weight'), h, vc, KVC, C, { atPos: true });
        out.push(attend(rt, { label: lab('attn'), q, kc, vc, o: this.b('o'), step, nH, nKV, D, ctx }));
      } else {
        linear(lab('q_proj'), p('self_attn.q_proj.weight'), h, q, QC, C);
        out.push(rope(rt, { label: lab('rope_q'), x: q, y: q, table: this.b('rope'), B: 1, T: ctx, nHeads: nH, D }));
        linear(lab('k_proj'), p('self_attn.k_proj.weight'), h, raw, KVC, C);
        out.push(rope(rt, { label: lab('rope_k'), x: raw, y: kc, table: this.b('rope'), B: 1, T: ctx, nHeads: nKV, D }));
        linear(lab('v_proj'), p('self_attn.v_proj.weight'), h, vc, KVC, C);
        out.push(...attentionForward(rt, { label: lab('attn'), q, k: kc, v: vc, o: this.b('o'), lse: this.b('lse'), B: 1, T: ctx, nH, nKV, D }));
      }
      // The residual stream x takes each block's output in place (the GEMV/GEMM accumulates).
      linear(lab('o_proj'), p('self_attn.o_proj.weight'), this.b('o'), x, C, QC, { accumulate: true });
      out.push(rmsnormForward(rt, { label: lab('norm2'), x, w: this.w(p('post_attention_layernorm.weight')), y: h, rstd: this.b('rstd'), dims: { N: M, C, eps } }));
      linear(lab('gate_proj'), p('mlp.gate_proj.weight'), h, this.b('gate'), F, C);
      linear(lab('up_proj'), p('mlp.up_proj.weight'), h, this.b('up'), F, C);
      out.push(swigluForward(rt, { label: lab('swiglu'), gate: this.b('gate'), up: this.b('up'), h: this.b('up'), dims: { N: M, F } }));
      linear(lab('down_proj'), p('mlp.down_proj.weight'), this.b('up'), x, C, F, { accumulate: true });
    }
    if (!one) return out; // the prompt's last token goes through a step, which gives its logits
    out.push(rmsnormForward(rt, { label: 'dec.normF', x, w: this.w('model.norm.weight'), y: h, rstd: this.b('rstd'), dims: { N: 1, C, eps } }));
    linear('dec.lm_head', cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight', h, this.b('logits'), V, C);
    return out;
  }

  /** Empties the cache and runs `ids` (1..ctx tokens) through it; returns the logits after the last one. */
  async prefill(ids: ArrayLike<number>): Promise<Float32Array> {
    const P = ids.length;
    if (P < 1) throw new Error('decoder: the prompt needs at least one token');
    if (P > this.ctx) throw new Error(`decoder: the prompt has ${P} tokens, the context holds ${this.ctx}`);
    this.pos = 0;
    if (P > 1) {
      const rows = new Int32Array(this.ctx);
      for (let i = 0; i < P - 1; i++) rows[i] = this.checkId(ids[i]);
      this.rt.write(this.b('ids'), rows);
      this.rt.run(this.prefillPass);
      this.pos = P - 1;
    }
    return this.step(ids[P - 1]);
  }

  /** Appends `token` at position `length`; returns the next token's logits [V]. One submit, one readback. */
  async step(token: number): Promise<Float32Array> {
    if (this.pos >= this.ctx) throw new Error(`decoder: the context of ${this.ctx} tokens is full`);
    const read = this.b('logitsRead');
    const bytes = this.dims.V * 4;
    this.rt.write(this.b('step'), new Uint32Array([this.checkId(token), this.pos]));
    this.rt.run(this.stepPass, (enc) => enc.copyBufferToBuffer(this.b('logits'), 0, read, 0, bytes));
    this.pos++;
    await read.mapAsync(GPUMapMode.READ, 0, bytes);
    const logits = new Float32Array(read.getMappedRange(0, bytes).slice(0));
    read.unmap();
    return logits;
  }

  private checkId(id: number): number {
    if (!Number.isInteger(id) || id < 0 || id >= this.dims.V) throw new Error(`decoder: token id ${id} outside [0, ${this.dims.V})`);
    return id;
  }

  destroy(): void {
    for (const b of this.buf.values()) this.rt.mem.free(b);
    this.buf.clear();
    if (this.ownWeights) this.rt.mem.free(this.ownWeights);
    this.ownWeights = null;
  }
}
