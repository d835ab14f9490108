/**
 * Plain-TS reference of a LoRA linear layer (float64 throughout), the specification the GPU
 * forward and backward are tested against. With W [out, in], A [r, in], B [out, r], s = alpha / r
 * and x [N, in] (x̃ = x ⊙ mask when dropout is on; mask holds 0 or 1/(1−p), PEFT's nn.Dropout on
 * the adapter's input only):
 *   forward   u = x̃·Aᵀ [N, r],  y = x·Wᵀ + s·u·Bᵀ
 *   backward  g = dy·B [N, r]
 *             dx = dy·W + s·(g·A) ⊙ mask
 *             dA = s·gᵀ·x̃ [r, in],  dB = s·dyᵀ·u [out, r]
 * (W gets no gradient: the base is frozen.)
 */
export interface LoraLinearRef {
  /** [out, in] */
  w: ArrayLike<number>;
  /** [r, in] */
  a: ArrayLike<number>;
  /** [out, r] */
  b: ArrayLike<number>;
  in: number;
  out: number;
  r: number;
  /** alpha / r */
  scale: number;
  /** [N, in] dropout multipliers on the adapter's input (0 or 1/(1−p)); absent: no dropout. */
  mask?: ArrayLike<number>;
}

export interface LoraForwardRef {
  /** [N, out] */
  y: Float64Array;
  /** [N, r]: x̃·Aᵀ, kept for backward (dB needs it). */
  u: Float64Array;
}

export interface LoraBackwardRef {
  /** [N, in] */
  dx: Float64Array;
  /** [r, in] */
  dA: Float64Array;
  /** [out, r] */
  dB: Float64Array;
}

function check(l: LoraLinearRef, n: number, x: ArrayLike<number>): void {
  const bad: string[] = [];
  if (l.w.length !== l.out * l.in) bad.push(`w has ${l.w.length} elements, want ${l.out}×${l.in}`);
  if (l.a.length !== l.r * l.in) bad.push(`a has ${l.a.length} elements, want ${l.r}×${l.in}`);
  if (l.b.length !== l.out * l.r) bad.push(`b has ${l.b.length} elements, want ${l.out}×${l.r}`);
  if (x.length !== n * l.in) bad.push(`x has ${x.length} elements, want ${n}×${l.in}`);
  if (l.mask && l.mask.length !== n * l.in) bad.push(`mask has ${l.mask.length} elements, want ${n}×${l.in}`);
  if (bad.length) throw new Error(`loraRef: ${bad.join('; ')}`);
}

/** x̃: the adapter's input after dropout. */
function dropped(l: LoraLinearRef, x: ArrayLike<number>): ArrayLike<number> {
  if (!l.mask) return x;
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = x[i] * l.mask[i];
  return out;
}

export function loraForwardRef(l: LoraLinearRef, x: ArrayLike<number>, n: number): LoraForwardRef {
  check(l, n, x);
  const { in: K, out: M, r } = l;
  const xd = dropped(l, x);
  const u = new Float64Array(n * r);
  const y = new Float64Array(n * M);
  for (let t = 0; t < n; t++) {
    for (let k = 0; k < r; k++) {
      let s = 0;
      for (let i = 0; i < K; i++) s += xd[t * K + i] * l.a[k * K + i];
      u[t * r + k] = s;
    }
    for (let o = 0; o < M; o++) {
      let base = 0;
      for (let i = 0; i < K; i++) base += x[t * K + i] * l.w[o * K + i];
      let low = 0;
      for (let k = 0; k < r; k++) low += u[t * r + k] * l.b[o * r + k];
      y[t * M + o] = base + l.scale * low;
    }
  }
  return { y, u };
}

export function loraBackwardRef(l: LoraLinearRef, x: ArrayLike<number>, dy: ArrayLike<number>, n: number): LoraBackwardRef {
  check(l, n, x);
  const { in: K, out: M, r, scale } = l;
  if (dy.length !== n * M) throw new Error(`loraRef: dy has ${dy.length} elements, want ${n}×${M}`);
  const xd = dropped(l, x);
  const { u } = loraForwardRef(l, x, n);
  const g = new Float64Array(n * r);
  for (let t = 0; t < n; t++) {
    for (let k = 0; k < r; k++) {
      let s = 0;
      for (let o = 0; o < M; o++) s += dy[t * M + o] * l.b[o * r + k];
      g[t * r + k] = s;
    }
  }
  const dx = new Float64Array(n * K);
  for (let t = 0; t < n; t++) {
    for (let i = 0; i < K; i++) {
      let base = 0;
      for (let o = 0; o < M; o++) base += dy[t * M + o] * l.w[o * K + i];
      let low = 0;
      for (let k = 0; k < r; k++) low += g[t * r + k] * l.a[k * K + i];
      dx[t * K + i] = base + scale * low * (l.mask ? l.mask[t * K + i] : 1);
    }
  }
  const dA = new Float64Array(r * K);
  for (let k = 0; k < r; k++) {
    for (let i = 0; i < K; i++) {
      let s = 0;
      for (let t = 0; t < n; t++) s += g[t * r + k] * xd[t * K + i];
      dA[k * K + i] = scale * s;
    }
  }
  const dB = new Float64Array(M * r);
  for (let o = 0; o < M; o++) {
    for (let k = 0; k < r; k++) {
      let s = 0;
      for (let t = 0; t < n; t++) s += dy[t * M + o] * u[t * r + k];
      dB[o * r + k] = scale * s;
    }
  }
  return { dx, dA, dB };
}
