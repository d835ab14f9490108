/**
 * AdamW reference (torch.optim.AdamW, single-tensor implementation, foreach=False), float64, in place.
 * Per element, at 1-based step t, with g = grad · clip:
 *   p *= 1 − lr·wd                 (only parameters that decay)
 *   m = m + (1 − β1)(g − m)        (exp_avg.lerp_(grad, 1 − β1))
 *   v = β2·v + (1 − β2)·g²
 *   p −= lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + eps)
 * clip follows torch.nn.utils.clip_grad_norm_: min(1, max_norm / (total_norm + 1e-6)).
 */
export interface AdamwHyper {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
}

export function clipCoefRef(norm: number, maxNorm: number): number {
  return maxNorm > 0 ? Math.min(1, maxNorm / (norm + 1e-6)) : 1;
}

export function adamwRef(
  p: Float64Array, g: ArrayLike<number>, m: Float64Array, v: Float64Array,
  hyper: AdamwHyper, step: number, clip = 1, decay = true,
): void {
  const { lr, beta1, beta2, eps, weightDecay } = hyper;
  const stepSize = lr / (1 - Math.pow(beta1, step));
  const bc2Sqrt = Math.sqrt(1 - Math.pow(beta2, step));
  for (let i = 0; i < p.length; i++) {
    const gi = g[i] * clip;
    if (decay) p[i] *= 1 - lr * weightDecay;
    m[i] += (1 - beta1) * (gi - m[i]);
    v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
    p[i] -= stepSize * (m[i] / (Math.sqrt(v[i]) / bc2Sqrt + eps));
  }
}
