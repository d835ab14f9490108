/**
 * SwiGLU reference in float64: h = silu(g) ⊙ u, silu(z) = z·σ(z) (HF LlamaMLP with hidden_act
 * "silu": down_proj(act_fn(gate_proj(x)) * up_proj(x))). All arrays are [N, F] flat.
 * silu'(z) = σ(z)·(1 + z·(1 − σ(z))).
 */
type Arr = ArrayLike<number>;

export function sigmoidRef(z: number): number {
  return z >= 0 ? 1 / (1 + Math.exp(-z)) : Math.exp(z) / (1 + Math.exp(z));
}

export function swigluForwardRef(gate: Arr, up: Arr): Float64Array {
  const h = new Float64Array(gate.length);
  for (let i = 0; i < h.length; i++) h[i] = gate[i] * sigmoidRef(gate[i]) * up[i];
  return h;
}

export function swigluBackwardRef(gate: Arr, up: Arr, dh: Arr): { dgate: Float64Array; dup: Float64Array } {
  const dgate = new Float64Array(gate.length);
  const dup = new Float64Array(gate.length);
  for (let i = 0; i < gate.length; i++) {
    const g = gate[i];
    const s = sigmoidRef(g);
    dup[i] = dh[i] * g * s;
    dgate[i] = dh[i] * up[i] * s * (1 + g * (1 - s));
  }
  return { dgate, dup };
}
