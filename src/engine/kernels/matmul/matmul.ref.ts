/**
 * Reference GEMM in float64: C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] (+ c0).
 *   op(A): A stored row-major [M,K], or [K,M] when transA.
 *   op(B): B stored row-major [K,N], or [N,K] when transB.
 *   c0: the previous C ([M,N]) for the accumulate form C += alpha·op(A)op(B).
 * The specification the WGSL kernels are tested against; O(MNK), micro shapes only.
 */
export interface MatmulRefOptions {
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  c0?: ArrayLike<number>;
}

export function matmulRef(
  a: ArrayLike<number>,
  b: ArrayLike<number>,
  M: number,
  N: number,
  K: number,
  opts: MatmulRefOptions = {},
): Float64Array {
  const { transA = false, transB = false, alpha = 1, c0 } = opts;
  if (a.length < M * K) throw new Error(`matmulRef: A has ${a.length} elements, needs ${M * K}`);
  if (b.length < K * N) throw new Error(`matmulRef: B has ${b.length} elements, needs ${K * N}`);
  if (c0 && c0.length < M * N) throw new Error(`matmulRef: c0 has ${c0.length} elements, needs ${M * N}`);
  // Strides of op(A)[m,k] and op(B)[k,n] in the stored arrays.
  const [sam, sak] = transA ? [1, M] : [K, 1];
  const [sbk, sbn] = transB ? [1, K] : [N, 1];
  const c = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += a[m * sam + k * sak] * b[k * sbk + n * sbn];
      c[m * N + n] = alpha * s + (c0 ? c0[m * N + n] : 0);
    }
  }
  return c;
}

/** Row-major transpose of a [rows, cols] array (test helper and layout conversions). */
export function transposeRef(x: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const y = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) y[c * rows + r] = x[r * cols + c];
  return y;
}
