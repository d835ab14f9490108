/**
 * Plain-TS reference LLaMA (float64): forward, backward and AdamW over the same flat parameter
 * layout as the GPU model, composed from the per-kernel references. This is the specification the
 * GPU training step is tested against, step by step.
 */
import { attentionBackwardRef, attentionForwardRef } from '../kernels/attention/attention.ref';
import { crossEntropyBackwardRef, crossEntropyForwardRef } from '../kernels/crossentropy/crossentropy.ref';
import { embeddingBackwardRef, embeddingForwardRef } from '../kernels/embedding/embedding.ref';
import { matmulRef } from '../kernels/matmul/matmul.ref';
import { rmsnormBackwardRef, rmsnormForwardRef } from '../kernels/rmsnorm/rmsnorm.ref';
import { ropeRef } from '../kernels/rope/rope.ref';
import { swigluBackwardRef, swigluForwardRef } from '../kernels/swiglu/swiglu.ref';
import { adamwRef, clipCoefRef } from '../optim/adamw.ref';
import { lrAt } from '../optim/schedule';
import { headDim, type ModelConfig } from './config';
import { type ParamLayout } from './params';

export interface RefOptimizer {
  lr: number; min_lr: number; warmup_steps: number; total_steps: number;
  beta1: number; beta2: number; eps: number; weight_decay: number; grad_clip: number;
}

interface LayerCache {
  xIn: Float64Array; rstd1: Float64Array; h1: Float64Array;
  q: Float64Array; k: Float64Array; v: Float64Array; o: Float64Array; lse: Float64Array;
  xMid: Float64Array; rstd2: Float64Array; h2: Float64Array;
  gate: Float64Array; up: Float64Array; act: Float64Array;
}

function add(a: Float64Array, b: ArrayLike<number>): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i];
  return out;
}

function addInto(a: Float64Array, b: ArrayLike<number>): void {
  for (let i = 0; i < a.length; i++) a[i] += b[i];
}

export class RefLlama {
  readonly params: Float64Array;
  readonly grads: Float64Array;
  readonly m: Float64Array;
  readonly v: Float64Array;
  step = 0;

  constructor(readonly cfg: ModelConfig, readonly layout: ParamLayout, init: ArrayLike<number>) {
    this.params = Float64Array.from(init);
    this.grads = new Float64Array(layout.totalFloats);
    this.m = new Float64Array(layout.totalFloats);
    this.v = new Float64Array(layout.totalFloats);
  }

  private p(name: string): Float64Array {
    const v = this.layout.byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return this.params.subarray(v.offset, v.offset + v.size);
  }

  private g(name: string): Float64Array {
    const v = this.layout.byName.get(name)!;
    return this.grads.subarray(v.offset, v.offset + v.size);
  }

  private lmHeadName(): string {
    return this.cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
  }

  /** Mean cross-entropy over B·T positions; `tokens` is [B, T+1]. Fills grads when `backward`. */
  lossAndGrad(tokens: Int32Array, B: number, T: number, backward = true): number {
    const c = this.cfg;
    const C = c.hidden_size, F = c.intermediate_size, nH = c.num_attention_heads, nKV = c.num_key_value_heads;
    const D = headDim(c), V = c.vocab_size, N = B * T, KVC = nKV * D, eps = c.rms_norm_eps;
    const ids = new Int32Array(N), targets = new Int32Array(N);
    for (let b = 0; b < B; b++) for (let t = 0; t < T; t++) {
      ids[b * T + t] = tokens[b * (T + 1) + t];
      targets[b * T + t] = tokens[b * (T + 1) + t + 1];
    }
    let x = embeddingForwardRef(ids, this.p('model.embed_tokens.weight'), N, V, C);
    const caches: LayerCache[] = [];
    for (let l = 0; l < c.num_hidden_layers; l++) {
      const P = (s: string) => this.p(`model.layers.${l}.${s}`);
      const xIn = x;
      const n1 = rmsnormForwardRef(xIn, P('input_layernorm.weight'), N, C, eps);
      const qRaw = matmulRef(n1.y, P('self_attn.q_proj.weight'), N, C, C, { transB: true });
      const kRaw = matmulRef(n1.y, P('self_attn.k_proj.weight'), N, KVC, C, { transB: true });
      const v = matmulRef(n1.y, P('self_attn.v_proj.weight'), N, KVC, C, { transB: true });
      const q = ropeRef(qRaw, B, T, nH, D, c.rope_theta);
      const k = ropeRef(kRaw, B, T, nKV, D, c.rope_theta);
      const att = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
      const xMid = add(xIn, matmulRef(att.o, P('self_attn.o_proj.weight'), N, C, C, { transB: true }));
      const n2 = rmsnormForwardRef(xMid, P('post_attention_layernorm.weight'), N, C, eps);
      const gate = matmulRef(n2.y, P('mlp.gate_proj.weight'), N, F, C, { transB: true });
      const up = matmulRef(n2.y, P('mlp.up_proj.weight'), N, F, C, { transB: true });
      const act = swigluForwardRef(gate, up);
      x = add(xMid, matmulRef(act, P('mlp.down_proj.weight'), N, C, F, { transB: true }));
      caches.push({ xIn, rstd1: n1.rstd, h1: n1.y, q, k, v, o: att.o, lse: att.lse, xMid, rstd2: n2.rstd, h2: n2.y, gate, up, act });
    }
    const nf = rmsnormForwardRef(x, this.p('model.norm.weight'), N, C, eps);
    const Wlm = this.p(this.lmHeadName());
    const logits = matmulRef(nf.y, Wlm, N, V, C, { transB: true });
    const ce = crossEntropyForwardRef(logits, targets, N, V);
    if (!backward) return ce.loss;

    this.grads.fill(0);
    const dlogits = crossEntropyBackwardRef(logits, targets, N, V);
    const dhf = matmulRef(dlogits, Wlm, N, C, V);
    addInto(this.g(this.lmHeadName()), matmulRef(dlogits, nf.y, V, C, N, { transA: true }));
    const fb = rmsnormBackwardRef(x, this.p('model.norm.weight'), dhf, N, C, eps);
    addInto(this.g('model.norm.weight'), fb.dw);
    const dres = Float64Array.from(fb.dx);
    for (let l = c.num_hidden_layers - 1; l >= 0; l--) {
      const P = (s: string) => this.p(`model.layers.${l}.${s}`);
      const G = (s: string) => this.g(`model.layers.${l}.${s}`);
      const k = caches[l];
      // MLP
      const dact = matmulRef(dres, P('mlp.down_proj.weight'), N, F, C);
      addInto(G('mlp.down_proj.weight'), matmulRef(dres, k.act, C, F, N, { transA: true }));
      const sw = swigluBackwardRef(k.gate, k.up, dact);
      const dh2 = matmulRef(sw.dgate, P('mlp.gate_proj.weight'), N, C, F);
      addInto(dh2, matmulRef(sw.dup, P('mlp.up_proj.weight'), N, C, F));
      addInto(G('mlp.gate_proj.weight'), matmulRef(sw.dgate, k.h2, F, C, N, { transA: true }));
      addInto(G('mlp.up_proj.weight'), matmulRef(sw.dup, k.h2, F, C, N, { transA: true }));
      const b2 = rmsnormBackwardRef(k.xMid, P('post_attention_layernorm.weight'), dh2, N, C, eps);
      addInto(dres, b2.dx);
      addInto(G('post_attention_layernorm.weight'), b2.dw);
      // Attention
      const dO = matmulRef(dres, P('self_attn.o_proj.weight'), N, C, C);
      addInto(G('self_attn.o_proj.weight'), matmulRef(dres, k.o, C, C, N, { transA: true }));
      const ab = attentionBackwardRef(k.q, k.k, k.v, k.o, k.lse, dO, B, T, nH, nKV, D);
      const dqRaw = ropeRef(ab.dq, B, T, nH, D, c.rope_theta, true);
      const dkRaw = ropeRef(ab.dk, B, T, nKV, D, c.rope_theta, true);
      const dh1 = matmulRef(dqRaw, P('self_attn.q_proj.weight'), N, C, C);
      addInto(dh1, matmulRef(dkRaw, P('self_attn.k_proj.weight'), N, C, KVC));
      addInto(dh1, matmulRef(ab.dv, P('self_attn.v_proj.weight'), N, C, KVC));
      addInto(G('self_attn.q_proj.weight'), matmulRef(dqRaw, k.h1, C, C, N, { transA: true }));
      addInto(G('self_attn.k_proj.weight'), matmulRef(dkRaw, k.h1, KVC, C, N, { transA: true }));
      addInto(G('self_attn.v_proj.weight'), matmulRef(ab.dv, k.h1, KVC, C, N, { transA: true }));
      const b1 = rmsnormBackwardRef(k.xIn, P('input_layernorm.weight'), dh1, N, C, eps);
      addInto(dres, b1.dx);
      addInto(G('input_layernorm.weight'), b1.dw);
    }
    addInto(this.g('model.embed_tokens.weight'), embeddingBackwardRef(ids, dres, N, V, C));
    return ce.loss;
  }

  gradNorm(): number {
    let s = 0;
    for (let i = 0; i < this.grads.length; i++) s += this.grads[i] * this.grads[i];
    return Math.sqrt(s);
  }

  /** One AdamW step with clipping and the lr schedule (torch semantics); returns {lr, gradNorm}. */
  optimizerStep(opt: RefOptimizer): { lr: number; gradNorm: number } {
    const lr = lrAt(this.step, opt);
    const norm = this.gradNorm();
    const clip = clipCoefRef(norm, opt.grad_clip);
    this.step++;
    const hyper = { lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps };
    for (const [range, wd] of [[this.layout.decayRange, opt.weight_decay], [this.layout.noDecayRange, 0]] as const) {
      const [s, e] = range;
      adamwRef(this.params.subarray(s, e), this.grads.subarray(s, e), this.m.subarray(s, e), this.v.subarray(s, e),
        { ...hyper, weightDecay: wd }, this.step, clip, wd > 0);
    }
    return { lr, gradNorm: norm };
  }
}
