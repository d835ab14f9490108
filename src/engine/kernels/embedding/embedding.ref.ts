/**
 * Token embedding reference in float64. N tokens, V vocab rows, C channels; ids [N] (integers),
 * W, dW: [V, C]; out, dout: [N, C]. Ids outside [0, V) read as a zero row and get no gradient.
 */
type Arr = ArrayLike<number>;

function valid(id: number, V: number): boolean {
  return Number.isInteger(id) && id >= 0 && id < V;
}

export function embeddingForwardRef(ids: Arr, W: Arr, N: number, V: number, C: number): Float64Array {
  const out = new Float64Array(N * C);
  for (let n = 0; n < N; n++) {
    const id = ids[n];
    if (!valid(id, V)) continue;
    for (let c = 0; c < C; c++) out[n * C + c] = W[id * C + c];
  }
  return out;
}

/** dW (added to dWIn when given: the accumulate flag). */
export function embeddingBackwardRef(ids: Arr, dout: Arr, N: number, V: number, C: number, dWIn?: Arr): Float64Array {
  const dW = dWIn ? Float64Array.from(dWIn) : new Float64Array(V * C);
  for (let n = 0; n < N; n++) {
    const id = ids[n];
    if (!valid(id, V)) continue;
    for (let c = 0; c < C; c++) dW[id * C + c] += dout[n * C + c];
  }
  return dW;
}
