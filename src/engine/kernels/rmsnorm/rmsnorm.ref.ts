/**
 * RMSNorm reference in float64 (HF LlamaRMSNorm): y = w ⊙ (x · rstd), rstd = 1/sqrt(mean(x²) + eps).
 * N rows, C channels; x, y, dy, dx: [N, C] row-major; w, dw: [C]; rstd: [N].
 *
 * Backward, per row, with x̂ = x·rstd and g = dy ⊙ w:
 *   ∂rstd/∂x_j = −rstd³ x_j / C  ⇒  dx = rstd · (g − x̂ · mean(g ⊙ x̂));   dw = Σ_rows dy ⊙ x̂.
 */
type Arr = ArrayLike<number>;

export function rmsnormForwardRef(x: Arr, w: Arr, N: number, C: number, eps: number): { y: Float64Array; rstd: Float64Array } {
  const y = new Float64Array(N * C);
  const rstd = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    let ss = 0;
    for (let c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
    const r = 1 / Math.sqrt(ss / C + eps);
    rstd[n] = r;
    for (let c = 0; c < C; c++) y[n * C + c] = w[c] * (x[n * C + c] * r);
  }
  return { y, rstd };
}

/** dx (added to `dxIn` when given: the accumulate flag) and dw (added to `dwIn` when given). */
export function rmsnormBackwardRef(
  x: Arr, w: Arr, dy: Arr, N: number, C: number, eps: number, dxIn?: Arr, dwIn?: Arr,
): { dx: Float64Array; dw: Float64Array } {
  const { rstd } = rmsnormForwardRef(x, w, N, C, eps);
  const dx = dxIn ? Float64Array.from(dxIn) : new Float64Array(N * C);
  const dw = dwIn ? Float64Array.from(dwIn) : new Float64Array(C);
  for (let n = 0; n < N; n++) {
    const r = rstd[n];
    let dot = 0;
    for (let c = 0; c < C; c++) dot += dy[n * C + c] * w[c] * x[n * C + c] * r;
    const m = dot / C;
    for (let c = 0; c < C; c++) {
      const i = n * C + c;
      const xh = x[i] * r;
      dx[i] += r * (dy[i] * w[c] - xh * m);
      dw[c] += dy[i] * xh;
    }
  }
  return { dx, dw };
}
