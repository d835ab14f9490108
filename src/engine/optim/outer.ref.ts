/**
 * DiLoCo's outer step, the plain-TS reference of outer.ts (fp32, one rounding per operation, the
 * shader's order). For a fragment of the parameters, with d̄ the group's mean pseudo-gradient:
 *   u = μ·u + d̄;  θ_global −= lr·(d̄ + μ·u)     (torch.optim.SGD(momentum=μ, nesterov=True))
 *   θ_local = θ_global (α = 0), else α·θ_local + (1 − α)·θ_global (Streaming DiLoCo's mixing).
 */
export interface OuterHyper {
  /** Outer learning rate (DiLoCo: 0.7). */
  lr: number;
  /** Nesterov momentum (DiLoCo: 0.9). */
  momentum: number;
  /** Share of the local weights kept when the global ones are applied (0: replace). */
  alpha: number;
}

const f = Math.fround;

/** θ_start − θ_local over [off, off + n): the pseudo-gradient. */
export function outerDeltaRef(global: Float32Array, w: Float32Array, off = 0, n = w.length - off): Float32Array {
  const d = new Float32Array(n);
  for (let i = 0; i < n; i++) d[i] = f(global[off + i] - w[off + i]);
  return d;
}

/** Applies the outer step for the mean pseudo-gradient `mean` to [off, off + mean.length), in place. */
export function outerStepRef(
  s: { w: Float32Array; global: Float32Array; momentum: Float32Array }, mean: Float32Array, h: OuterHyper, off = 0,
): void {
  const lr = f(h.lr);
  const mu = f(h.momentum);
  const alpha = f(h.alpha);
  const rest = f(1 - h.alpha);
  for (let i = 0; i < mean.length; i++) {
    const j = off + i;
    const g = mean[i];
    const un = f(f(mu * s.momentum[j]) + g);
    s.momentum[j] = un;
    const gl = f(s.global[j] - f(lr * f(g + f(mu * un))));
    s.global[j] = gl;
    s.w[j] = alpha === 0 ? gl : f(f(alpha * s.w[j]) + f(rest * gl));
  }
}
