/** Plain-TS references of the reductions, in float64. */
type Arr = ArrayLike<number>;

export function sumSquaresRef(x: Arr): number {
  let s = 0;
  for (let i = 0; i < x.length; i++) s += x[i] * x[i];
  return s;
}

/** sqrt(Σ over all arrays of Σ x²): torch.nn.utils.clip_grad_norm_'s total_norm (norm_type 2). */
export function globalNormRef(...xs: Arr[]): number {
  return Math.sqrt(xs.reduce((s, x) => s + sumSquaresRef(x), 0));
}
