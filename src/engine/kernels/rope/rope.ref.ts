/**
 * Rotary position embedding (Hugging Face LLaMA convention), plain TS: the table builder shared by
 * the GPU kernel and the reference, and a float64 reference of the rotation itself.
 *
 * Shapes: B batch, T sequence length, H heads (nHeads), D head dim (even), P = D/2 rotation pairs.
 * x, y: [B, T, H, D] row-major; table: cos [T, P] then sin [T, P].
 * Pair i rotates (x[i], x[i + P]) by angle pos·inv_freq[i] (rotate_half = cat(−x2, x1)), not the
 * interleaved (x[2i], x[2i+1]) pairs of the original paper.
 */

/**
 * cos/sin of pos·inv_freq in fp32, mirroring torch's fp32 steps in LlamaRotaryEmbedding:
 * `inv_freq = 1.0 / (base ** (arange(0, D, 2).float() / D))`, `freqs = pos.float() * inv_freq`,
 * `emb.cos()`, `emb.sin()`. Each step is rounded to fp32 with Math.fround so the GPU kernel (which
 * reads this table) and the reference see identical angles; only the last bit of pow/cos may
 * differ from torch's vectorised libm.
 */
export function ropeTable(T: number, D: number, theta: number): { cos: Float32Array; sin: Float32Array } {
  if (D % 2 !== 0) throw new Error(`ropeTable: head dim ${D} must be even`);
  const P = D / 2;
  const invFreq = new Float32Array(P);
  const base = Math.fround(theta);
  for (let i = 0; i < P; i++) {
    const expo = Math.fround((2 * i) / D);
    invFreq[i] = Math.fround(1 / Math.fround(Math.pow(base, expo)));
  }
  const cos = new Float32Array(T * P);
  const sin = new Float32Array(T * P);
  for (let t = 0; t < T; t++) {
    for (let i = 0; i < P; i++) {
      const f = Math.fround(t * invFreq[i]);
      cos[t * P + i] = Math.cos(f);
      sin[t * P + i] = Math.sin(f);
    }
  }
  return { cos, sin };
}

/** The table as the GPU kernel reads it: cos [T, D/2] then sin [T, D/2] in one array. */
export function ropeTablePacked(T: number, D: number, theta: number): Float32Array {
  const { cos, sin } = ropeTable(T, D, theta);
  const out = new Float32Array(2 * cos.length);
  out.set(cos, 0);
  out.set(sin, cos.length);
  return out;
}

/**
 * y = x·cos + rotate_half(x)·sin per HF (positions 0..T−1 in every sequence), in float64 on the fp32
 * table. `inverse` rotates by −angle: that is the backward (dx from dy), since the rotation is
 * orthogonal.
 */
export function ropeRef(
  x: ArrayLike<number>, B: number, T: number, nHeads: number, D: number, theta: number, inverse = false,
): Float64Array {
  const P = D / 2;
  const { cos, sin } = ropeTable(T, D, theta);
  const sgn = inverse ? -1 : 1;
  const y = new Float64Array(B * T * nHeads * D);
  for (let b = 0; b < B; b++) {
    for (let t = 0; t < T; t++) {
      for (let h = 0; h < nHeads; h++) {
        const base = ((b * T + t) * nHeads + h) * D;
        for (let i = 0; i < P; i++) {
          const c = cos[t * P + i];
          const s = sgn * sin[t * P + i];
          const x1 = x[base + i];
          const x2 = x[base + i + P];
          y[base + i] = x1 * c - x2 * s;
          y[base + i + P] = x2 * c + x1 * s;
        }
      }
    }
  }
  return y;
}
