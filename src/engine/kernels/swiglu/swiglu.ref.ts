/**
 * SwiGLU reference in float64: h = silu(g) ⊙ u, silu(z) = z·σ(z) (HF LlamaMLP with hidden_act
 * "silu": down_proj(act_fn(gate_proj(x)) * up_proj(x))). All arrays are [N, F] flat.
 * silu'(z) = σ(z)·(1 + z·(1 − σ(z))).
 */
import { type Quantized, quantizeRef } from '../../quant/quantizer';

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

/**
 * The INT8 codes swigluBackwardQuantized writes: per row r, [dgate row r | dup row r] (2F values)
 * quantized with one scale over both (quantizeRef 'row', rowLength 2F): the dY of gate_proj's and
 * up_proj's dX as one GEMM over K = 2F. dgate, dup: [N, F] fp32 as the backward wrote them.
 */
export function swigluBackwardCodesRef(dgate: Arr, dup: Arr, N: number, F: number): Quantized {
  const cat = new Float32Array(N * 2 * F);
  for (let r = 0; r < N; r++) {
    for (let c = 0; c < F; c++) {
      cat[r * 2 * F + c] = dgate[r * F + c];
      cat[r * 2 * F + F + c] = dup[r * F + c];
    }
  }
  return quantizeRef(cat, 'int8', { kind: 'row', rowLength: 2 * F });
}
