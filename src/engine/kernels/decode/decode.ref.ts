/**
 * Float64 references of the decode kernels (decode.ts): one row's linear, RoPE at one position,
 * and one query's attention over a KV cache (HF LLaMA's maths, GQA by head groups).
 */
type Arr = ArrayLike<number>;

/** y[n] = Σ_k W[n, k]·x[k], W [N, K] row-major. */
export function gemvRef(x: Arr, w: Arr, N: number, K: number): Float64Array {
  const y = new Float64Array(N);
  for (let n = 0; n < N; n++) {
    let s = 0;
    for (let k = 0; k < K; k++) s += w[n * K + k] * x[k];
    y[n] = s;
  }
  return y;
}

/** RoPE (rotate_half pairs (i, i + D/2)) of x [H, D] at position pos, with ropeTablePacked's table of tableT rows. */
export function ropeAtRef(x: Arr, table: Arr, H: number, D: number, tableT: number, pos: number): Float64Array {
  const P = D / 2;
  const y = new Float64Array(H * D);
  for (let h = 0; h < H; h++) {
    for (let j = 0; j < P; j++) {
      const c = table[pos * P + j];
      const s = table[tableT * P + pos * P + j];
      const x1 = x[h * D + j];
      const x2 = x[h * D + j + P];
      y[h * D + j] = x1 * c - x2 * s;
      y[h * D + j + P] = x2 * c + x1 * s;
    }
  }
  return y;
}

/** o [nH, D] for q [nH, D] over cache rows 0..pos of kc, vc [ctx, nKV, D]. */
export function attendRef(q: Arr, kc: Arr, vc: Arr, nH: number, nKV: number, D: number, pos: number): Float64Array {
  const o = new Float64Array(nH * D);
  const row = nKV * D;
  const scale = 1 / Math.sqrt(D);
  for (let h = 0; h < nH; h++) {
    const kv = Math.floor(h / (nH / nKV)) * D;
    const s = new Float64Array(pos + 1);
    let m = -Infinity;
    for (let t = 0; t <= pos; t++) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[h * D + d] * kc[t * row + kv + d];
      s[t] = dot * scale;
      m = Math.max(m, s[t]);
    }
    let sum = 0;
    for (let t = 0; t <= pos; t++) sum += (s[t] = Math.exp(s[t] - m));
    for (let t = 0; t <= pos; t++) {
      for (let d = 0; d < D; d++) o[h * D + d] += (s[t] / sum) * vc[t * row + kv + d];
    }
  }
  return o;
}
