/**
 * Plain-TS reference of a LoRA training step (float64), built on the reference LLaMA: without
 * dropout an adapted layer computes x·(W + s·B·A)ᵀ, so the forward is RefLlama's with the merged
 * weights, and from that weight's gradient G = ∂L/∂W_eff the chain rule gives
 *   dA = s·Bᵀ·G [r, in],   dB = s·G·Aᵀ [out, r].
 * Then clip by the global norm of the adapter gradients and AdamW on the adapters only (the base is
 * frozen), torch semantics (adamw.ref.ts). This is what the GPU LoRA step and the PyTorch + PEFT
 * replay (tools/make-lora-fixture.py) are compared with.
 */
import { type RefOptimizer, RefLlama } from '../model/llama.ref';
import { type ModelConfig } from '../model/config';
import { paramLayout } from '../model/params';
import { adamwRef, clipCoefRef } from '../optim/adamw.ref';
import { lrAt } from '../optim/schedule';
import { loraAdapters, loraScale, LoraSpecSchema, type LoraAdapter, type LoraSpec } from './spec';

export class RefLoraTrainer {
  readonly spec: LoraSpec;
  readonly adapters: LoraAdapter[];
  /** Adapter tensors (lab names), float64, updated in place by step(). */
  readonly tensors: Map<string, Float64Array>;
  readonly grads: Map<string, Float64Array>;
  readonly m: Map<string, Float64Array>;
  readonly v: Map<string, Float64Array>;
  /** Optimizer steps taken. */
  step = 0;
  private readonly model: RefLlama;
  private readonly base: Map<string, ArrayLike<number>>;

  constructor(readonly cfg: ModelConfig, spec: LoraSpec, base: Map<string, ArrayLike<number>>, adapters: Map<string, ArrayLike<number>>) {
    this.spec = LoraSpecSchema.parse(spec);
    if (this.spec.dropout !== 0) throw new Error('RefLoraTrainer: dropout must be 0 (the merged-weight forward has no per-token mask)');
    this.adapters = loraAdapters(cfg, this.spec);
    const layout = paramLayout(cfg);
    const flat = new Float64Array(layout.totalFloats);
    for (const p of layout.views) {
      const w = base.get(p.name);
      if (!w || w.length !== p.size) throw new Error(`RefLoraTrainer: base ${p.name} ${w ? `has ${w.length} elements, want ${p.size}` : 'is missing'}`);
      flat.set(w, p.offset);
    }
    this.model = new RefLlama(cfg, layout, flat);
    this.base = base;
    this.tensors = new Map();
    for (const a of this.adapters) {
      for (const [name, size] of [[a.a, this.spec.rank * a.in], [a.b, a.out * this.spec.rank]] as const) {
        const t = adapters.get(name);
        if (!t || t.length !== size) throw new Error(`RefLoraTrainer: adapter ${name} ${t ? `has ${t.length} elements, want ${size}` : 'is missing'}`);
        this.tensors.set(name, Float64Array.from(t));
      }
    }
    const zeros = () => new Map([...this.tensors].map(([n, t]) => [n, new Float64Array(t.length)]));
    this.grads = zeros();
    this.m = zeros();
    this.v = zeros();
  }

  /** Writes W + s·B·A into the reference model's adapted weights. */
  private merge(): void {
    const s = loraScale(this.spec), r = this.spec.rank;
    for (const a of this.adapters) {
      const W = this.base.get(a.base)!, A = this.tensors.get(a.a)!, B = this.tensors.get(a.b)!;
      const view = this.model.layout.byName.get(a.base)!;
      const dst = this.model.params.subarray(view.offset, view.offset + view.size);
      for (let o = 0; o < a.out; o++) {
        for (let i = 0; i < a.in; i++) {
          let acc = 0;
          for (let k = 0; k < r; k++) acc += B[o * r + k] * A[k * a.in + i];
          dst[o * a.in + i] = W[o * a.in + i] + s * acc;
        }
      }
    }
  }

  /** Mean cross-entropy of `tokens` [B, T+1]; fills `grads` (the adapters') when `backward`. */
  lossAndGrad(tokens: Int32Array, B: number, T: number, backward = true): number {
    this.merge();
    const loss = this.model.lossAndGrad(tokens, B, T, backward);
    if (!backward) return loss;
    const s = loraScale(this.spec), r = this.spec.rank;
    for (const a of this.adapters) {
      const view = this.model.layout.byName.get(a.base)!;
      const G = this.model.grads.subarray(view.offset, view.offset + view.size);
      const A = this.tensors.get(a.a)!, Bm = this.tensors.get(a.b)!;
      const dA = this.grads.get(a.a)!, dB = this.grads.get(a.b)!;
      dA.fill(0);
      for (let o = 0; o < a.out; o++) {
        for (let k = 0; k < r; k++) {
          const b = s * Bm[o * r + k];
          let db = 0;
          for (let i = 0; i < a.in; i++) {
            const g = G[o * a.in + i];
            dA[k * a.in + i] += b * g;
            db += g * A[k * a.in + i];
          }
          dB[o * r + k] = s * db;
        }
      }
    }
    return loss;
  }

  /** Global L2 norm of the adapter gradients (what clip_grad_norm_ over the trainable parameters sees). */
  gradNorm(): number {
    let sum = 0;
    for (const g of this.grads.values()) for (let i = 0; i < g.length; i++) sum += g[i] * g[i];
    return Math.sqrt(sum);
  }

  /** One training step on `tokens`: loss, clip, AdamW (every adapter tensor decays, as loraParamSpecs says). */
  trainStep(tokens: Int32Array, B: number, T: number, opt: RefOptimizer): { loss: number; lr: number; gradNorm: number } {
    const loss = this.lossAndGrad(tokens, B, T);
    const lr = lrAt(this.step, opt);
    const gradNorm = this.gradNorm();
    const clip = clipCoefRef(gradNorm, opt.grad_clip);
    this.step++;
    const hyper = { lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weightDecay: opt.weight_decay };
    for (const [n, p] of this.tensors) adamwRef(p, this.grads.get(n)!, this.m.get(n)!, this.v.get(n)!, hyper, this.step, clip, opt.weight_decay > 0);
    return { loss, lr, gradNorm };
  }
}
