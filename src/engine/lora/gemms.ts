/**
 * The adapters' GEMMs around the frozen base's (PEFT's forward: y = base(x) + s·B(A(dropout(x))), s = alpha/r).
 * The model calls `down` right before a base linear's GEMM (u = x̃·Aᵀ, x̃ the dropped input) and `up`
 * right after it (y += s·u·Bᵀ). Backward, at the place of the base dW GEMM (which a frozen base
 * skips; its input x is live there): x̃ and u again from the same seed, dB = s·dYᵀ·u, v = dY·B,
 * dA = s·vᵀ·x̃; after the base dX GEMM: dX += s·v·A (through the dropout mask). u is recomputed
 * rather than saved: N·r floats per adapter would be most of what LoRA saves at small ranks.
 * Reference: ./lora.ref.ts.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { type DropoutKernels, dropoutKernels } from '../kernels/dropout/dropout';
import { matmul, matmulSteps } from '../kernels/matmul/matmul';
import type { ModelDims } from '../model/dims';
import { deriveSeed } from '../util/rng';
import { type LoraPlan, loraRankKey } from './plan';
import type { LoraAdapter } from './spec';

export class LoraGemms {
  private readonly drop = new Map<string, DropoutKernels>();

  constructor(
    private readonly rt: Runtime,
    readonly plan: LoraPlan,
    private readonly dims: ModelDims,
    private readonly b: (key: string) => GPUBuffer,
  ) {
    if (plan.spec.dropout > 0) {
      for (const a of plan.adapters) this.drop.set(a.base, dropoutKernels(rt, `lora.${a.base}`, dims.N * a.in, plan.spec.dropout));
    }
  }

  /** The adapter on base weight `name` (undefined: that linear has none). */
  on(name: string): LoraAdapter | undefined {
    return this.plan.byBase.get(name);
  }

  private t(key: 'lora.weights' | 'lora.grads', name: string): Binding {
    const v = this.plan.layout.byName.get(name)!;
    return { buffer: this.b(key), offset: v.offset * 4, size: v.size * 4 };
  }

  private rows(key: string, width: number): Binding {
    return { buffer: this.b(key), offset: 0, size: this.dims.N * width * 4 };
  }

  /** x̃: x itself, or its dropped copy in lora.xd (written by the returned dispatches). */
  private input(a: LoraAdapter, label: string, x: GPUBuffer, out: Dispatch[]): Binding {
    const x0 = { buffer: x, offset: 0, size: this.dims.N * a.in * 4 };
    const d = this.drop.get(a.base);
    if (!d) return x0;
    const xd = this.rows('lora.xd', a.in);
    out.push(d.apply(`${label}.drop`, x0, xd));
    return xd;
  }

  /** u = x̃·Aᵀ into lora.u (before the base GEMM of `a`, whose input x is). */
  down(a: LoraAdapter, label: string, x: GPUBuffer): Dispatch[] {
    const out: Dispatch[] = [];
    const xd = this.input(a, label, x, out);
    const { N } = this.dims;
    out.push(matmul(this.rt, { label: `${label}.lora_A`, a: xd, b: this.t('lora.weights', a.a), c: this.rows('lora.u', this.plan.spec.rank), M: N, N: this.plan.spec.rank, K: a.in, transB: true }));
    return out;
  }

  /** y += s·u·Bᵀ (after the base GEMM wrote or accumulated y). */
  up(a: LoraAdapter, label: string, y: Binding): Dispatch {
    const { N } = this.dims;
    return matmul(this.rt, { label: `${label}.lora_B`, a: this.rows('lora.u', this.plan.spec.rank), b: this.t('lora.weights', a.b), c: y, M: N, N: a.out, K: this.plan.spec.rank, transB: true, accumulate: true, alpha: this.plan.scale });
  }

  /**
   * dA and dB of adapter `a` from dY [N, out] and the base GEMM's input x [N, in] (live here), and
   * v = dY·B kept for `dx`. `workspace`: split-K partials, a buffer dead at this point (the base dW's).
   */
  grads(a: LoraAdapter, label: string, dy: GPUBuffer, x: GPUBuffer, workspace?: Binding): Dispatch[] {
    const out: Dispatch[] = [];
    const { N } = this.dims;
    const r = this.plan.spec.rank;
    const s = this.plan.scale;
    const xd = this.input(a, label, x, out);
    const u = this.rows('lora.u', r);
    const v = this.rows(loraRankKey(a.target), r);
    const dY = { buffer: dy, offset: 0, size: N * a.out * 4 };
    out.push(
      matmul(this.rt, { label: `${label}.lora_A.u`, a: xd, b: this.t('lora.weights', a.a), c: u, M: N, N: r, K: a.in, transB: true }),
      ...matmulSteps(this.rt, { label: `${label}.lora_B.dw`, a: dY, b: u, c: this.t('lora.grads', a.b), M: a.out, N: r, K: N, transA: true, alpha: s, workspace }),
      matmul(this.rt, { label: `${label}.lora_B.dx`, a: dY, b: this.t('lora.weights', a.b), c: v, M: N, N: r, K: a.out }),
      ...matmulSteps(this.rt, { label: `${label}.lora_A.dw`, a: v, b: xd, c: this.t('lora.grads', a.a), M: r, N: a.in, K: N, transA: true, alpha: s, workspace }),
    );
    return out;
  }

  /** dX += s·v·A (masked like the forward's x̃), after the base dX GEMM wrote dX. */
  dx(a: LoraAdapter, label: string, dx: GPUBuffer): Dispatch[] {
    const { N } = this.dims;
    const r = this.plan.spec.rank;
    const v = this.rows(loraRankKey(a.target), r);
    const dX = { buffer: dx, offset: 0, size: N * a.in * 4 };
    const d = this.drop.get(a.base);
    const mm = (c: Binding, accumulate: boolean) => matmul(this.rt, { label: `${label}.lora_A.dx`, a: v, b: this.t('lora.weights', a.a), c, M: N, N: a.in, K: r, accumulate, alpha: this.plan.scale });
    if (!d) return [mm(dX, true)];
    const g = this.rows('lora.xd', a.in);
    return [mm(g, false), d.accumulateMasked(`${label}.drop.dx`, g, dX)];
  }

  /** One dropout seed per adapter and step (forward and backward of a step agree). */
  setStepSeed(step: number): void {
    for (const [name, d] of this.drop) d.setSeed(deriveSeed(step, `lora.drop.${name}`));
  }

  /** Evaluation runs the forward without dropout (PEFT's eval mode). */
  setDropoutActive(on: boolean): void {
    for (const d of this.drop.values()) d.setActive(on);
  }

  /** Frees the dropout kernels' parameter blocks (the model's destroy; they outlived it before). */
  destroy(): void {
    for (const d of this.drop.values()) d.destroy();
    this.drop.clear();
  }
}
