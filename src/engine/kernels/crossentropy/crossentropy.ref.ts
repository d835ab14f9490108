/**
 * Cross-entropy reference in float64 (torch F.cross_entropy, reduction 'mean', with every target
 * outside [0, V) ignored). N rows, V vocab; logits, dlogits: [N, V]; targets [N].
 *   loss_n = logsumexp(logits_n) − logits_n[t_n];  loss = Σ_counted loss_n / count
 *   dlogits_n = (softmax(logits_n) − onehot(t_n)) / count; ignored rows: 0. No counted row: loss 0.
 */
type Arr = ArrayLike<number>;

function counted(t: number, V: number): boolean {
  return Number.isInteger(t) && t >= 0 && t < V;
}

function logSumExp(x: Arr, base: number, V: number): number {
  let m = -Infinity;
  for (let i = 0; i < V; i++) m = Math.max(m, x[base + i]);
  let s = 0;
  for (let i = 0; i < V; i++) s += Math.exp(x[base + i] - m);
  return m + Math.log(s);
}

export function crossEntropyForwardRef(logits: Arr, targets: Arr, N: number, V: number): { losses: Float64Array; loss: number; count: number } {
  const losses = new Float64Array(N);
  let count = 0;
  let sum = 0;
  for (let n = 0; n < N; n++) {
    const t = targets[n];
    if (!counted(t, V)) continue;
    losses[n] = logSumExp(logits, n * V, V) - logits[n * V + t];
    sum += losses[n];
    count++;
  }
  return { losses, loss: count > 0 ? sum / count : 0, count };
}

export function crossEntropyBackwardRef(logits: Arr, targets: Arr, N: number, V: number): Float64Array {
  const d = new Float64Array(N * V);
  let count = 0;
  for (let n = 0; n < N; n++) if (counted(targets[n], V)) count++;
  for (let n = 0; n < N; n++) {
    const t = targets[n];
    if (!counted(t, V)) continue;
    const lse = logSumExp(logits, n * V, V);
    for (let i = 0; i < V; i++) d[n * V + i] = (Math.exp(logits[n * V + i] - lse) - (i === t ? 1 : 0)) / count;
  }
  return d;
}
