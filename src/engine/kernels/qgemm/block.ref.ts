/**
 * References for ./qgemm-block.ts: the transposed block quantizer is quantizeRef on the transposed
 * matrix (so it inherits its rounding rules and SR indexing), and the blocked GEMM is computed as
 * the kernel does — exact integer sums per block, then f32 products and f32 sums in block order.
 */
import { type Quantized, quantizeRef, type QuantizeOptions } from '../../quant/quantizer';

/** xᵀ of x [R, CN] (row-major). */
export function transposeRef(x: ArrayLike<number>, R: number, CN: number): Float32Array {
  const t = new Float32Array(R * CN);
  for (let r = 0; r < R; r++) for (let c = 0; c < CN; c++) t[c * R + r] = x[r * CN + c];
  return t;
}

/** quantizeTransposedI8's codes and scales: xᵀ quantized INT8 in groups of G along its rows. */
export function quantizeTransposedI8Ref(x: ArrayLike<number>, R: number, CN: number, G: number, opts: QuantizeOptions = {}): Quantized {
  if (R % G) throw new Error(`quantizeTransposedI8Ref: G=${G} must divide R=${R}`);
  return quantizeRef(transposeRef(x, R, CN), 'int8', { kind: 'group', size: G }, opts);
}

/** qgemmI8Blocked on int8 values a [M, K], b [N, K] and scales [·, K/G], as the kernel rounds. */
export function qgemmI8BlockedRef(a: Int8Array, sa: Float32Array, b: Int8Array, sb: Float32Array,
  M: number, N: number, K: number, G: number, c0?: Float32Array): Float32Array {
  const KB = K / G;
  const c = new Float32Array(M * N);
  const f = Math.fround;
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let kb = 0; kb < KB; kb++) {
        let acc = 0;
        for (let k = kb * G; k < (kb + 1) * G; k++) acc += a[m * K + k] * b[n * K + k];
        s = f(s + f(f(acc * sa[m * KB + kb]) * sb[n * KB + kb]));
      }
      c[m * N + n] = c0 ? f(c0[m * N + n] + s) : s;
    }
  }
  return c;
}
