/** Shared checks for the quantized-GEMM tests. */
import { expect } from 'vitest';

export function absOf(a: ArrayLike<number>): Float64Array {
  return Float64Array.from(a, Math.abs);
}

/**
 * |c − ref| ≤ 2e-6·Σ_k|x_mk·w_nk| per output: fp32 summation-order error of a K-term dot product
 * (K·2^-24 relative to Σ|terms| for K ≤ 32, well within) — nothing left for quantization error,
 * since the reference dequantizes with the same codes.
 */
export function expectGemmClose(got: ArrayLike<number>, ref: ArrayLike<number>, absRef: ArrayLike<number>, label: string): void {
  expect(got.length, `${label} length`).toBe(ref.length);
  const bad: string[] = [];
  for (let i = 0; i < ref.length; i++) {
    const tol = 2e-6 * absRef[i] + 1e-30;
    if (!(Math.abs(got[i] - ref[i]) <= tol) && bad.length < 6) bad.push(`[${i}] got ${got[i]} want ${ref[i]} tol ${tol}`);
  }
  expect(bad, label).toEqual([]);
}
