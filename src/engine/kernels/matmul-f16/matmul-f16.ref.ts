/**
 * Reference for the f16 GEMMs: the operands rounded to f16 (quant/f16.ts, exactly as storing them
 * in an `array<f16>` does), then multiplied in float64. A product of two f16 values is exact in
 * f32 (11 + 11 significant bits), so a kernel accumulating in f32 differs from this only by its
 * f32 additions; `f16GemmTolerance` bounds that per element.
 *   C[M,N] = alpha · op(A)[M,K] · op(B)[K,N] (+ c0), layouts as kernels/matmul/matmul.ref.ts.
 */
import { roundF16 } from '../../quant/f16';

export interface MatmulF16RefOptions {
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  c0?: ArrayLike<number>;
  /** The operands are already f16 values (skip the rounding). */
  roundedInputs?: boolean;
}

export interface MatmulF16RefResult {
  c: Float64Array;
  /** Per element, alpha·Σ_k |op(A)[m,k]·op(B)[k,n]|: what f32 accumulation's rounding error scales with. */
  absSum: Float64Array;
}

export function matmulF16Ref(a: ArrayLike<number>, b: ArrayLike<number>, M: number, N: number, K: number, o: MatmulF16RefOptions = {}): MatmulF16RefResult {
  const { transA = false, transB = false, alpha = 1, c0 } = o;
  if (a.length < M * K) throw new Error(`matmulF16Ref: A has ${a.length} elements, needs ${M * K}`);
  if (b.length < K * N) throw new Error(`matmulF16Ref: B has ${b.length} elements, needs ${K * N}`);
  const ra = o.roundedInputs ? Float64Array.from({ length: M * K }, (_, i) => a[i]) : Float64Array.from({ length: M * K }, (_, i) => roundF16(a[i]));
  const rb = o.roundedInputs ? Float64Array.from({ length: K * N }, (_, i) => b[i]) : Float64Array.from({ length: K * N }, (_, i) => roundF16(b[i]));
  const [sam, sak] = transA ? [1, M] : [K, 1];
  const [sbk, sbn] = transB ? [1, K] : [N, 1];
  const c = new Float64Array(M * N);
  const absSum = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      let t = 0;
      for (let k = 0; k < K; k++) {
        const p = ra[m * sam + k * sak] * rb[k * sbk + n * sbn];
        s += p;
        t += Math.abs(p);
      }
      c[m * N + n] = alpha * s + (c0 ? c0[m * N + n] : 0);
      absSum[m * N + n] = Math.abs(alpha) * t;
    }
  }
  return { c, absSum };
}

/**
 * A low-rank epilogue's term, s·Σ_j U[j, m]·V (V [r, N], or [N, r] with transV), in float64 with its Σ|products|.
 * `tensorCores`: as the tensor-core kernel computes it (tc.ts tcLr): Σ_j f16(U[j, m])·f16(s·V[j, n]), s·V
 * rounded to f32 first; else in f32 operands, as lowRank() sums them.
 */
export function lowRankRef(u: ArrayLike<number>, v: ArrayLike<number>, M: number, N: number, rank: number,
  o: { transV: boolean; scale: number; tensorCores: boolean }): MatmulF16RefResult {
  const c = new Float64Array(M * N);
  const absSum = new Float64Array(M * N);
  const vAt = (j: number, n: number) => v[o.transV ? n * rank + j : j * N + n];
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      let t = 0;
      for (let j = 0; j < rank; j++) {
        const p = o.tensorCores ? roundF16(u[j * M + m]) * roundF16(Math.fround(o.scale * vAt(j, n))) : o.scale * u[j * M + m] * vAt(j, n);
        s += p;
        t += Math.abs(p);
      }
      c[m * N + n] = s;
      absSum[m * N + n] = t;
    }
  }
  return { c, absSum };
}

/**
 * The reference at some outputs only (flat indices m·N + n), for shapes too big to multiply
 * whole in TypeScript: `c` and `absSum` hold those elements, in `at`'s order.
 */
export function matmulF16RefAt(a: ArrayLike<number>, b: ArrayLike<number>, M: number, N: number, K: number, at: ArrayLike<number>, o: MatmulF16RefOptions = {}): MatmulF16RefResult {
  const { transA = false, transB = false, alpha = 1, c0 } = o;
  const [sam, sak] = transA ? [1, M] : [K, 1];
  const [sbk, sbn] = transB ? [1, K] : [N, 1];
  const r = (x: number) => (o.roundedInputs ? x : roundF16(x));
  const c = new Float64Array(at.length);
  const absSum = new Float64Array(at.length);
  for (let i = 0; i < at.length; i++) {
    const m = Math.floor(at[i] / N);
    const n = at[i] % N;
    let s = 0;
    let t = 0;
    for (let k = 0; k < K; k++) {
      const p = r(a[m * sam + k * sak]) * r(b[k * sbk + n * sbn]);
      s += p;
      t += Math.abs(p);
    }
    c[i] = alpha * s + (c0 ? c0[at[i]] : 0);
    absSum[i] = Math.abs(alpha) * t;
  }
  return { c, absSum };
}

/**
 * Largest error allowed for an element of an f32-accumulated f16 GEMM: K f32 roundings of partial
 * sums (γ_K ≈ K·2^-24 of Σ|products|) with room for a tensor core's own summation order and
 * alignment (×4), plus the final alpha and c0 roundings. An f16 accumulator (error ~2^-11 of the
 * sum) or a wrong layout exceeds it by far.
 */
export function f16GemmTolerance(absSum: number, K: number, c = 0): number {
  return 4 * Math.max(K, 1) * 2 ** -24 * absSum + 2 ** -23 * (absSum + Math.abs(c)) + 1e-30;
}

export interface F16GemmComparison {
  ok: boolean;
  maxAbsErr: number;
  /** max over elements of error / tolerance (≤ 1 passes). */
  worstRatio: number;
  bad: number;
}

/** Compares a GEMM's output with the reference, element by element within f16GemmTolerance. */
export function compareF16Gemm(got: ArrayLike<number>, ref: MatmulF16RefResult, K: number): F16GemmComparison {
  let maxAbsErr = 0;
  let worstRatio = 0;
  let bad = 0;
  for (let i = 0; i < ref.c.length; i++) {
    const err = Math.abs(got[i] - ref.c[i]);
    const tol = f16GemmTolerance(ref.absSum[i], K, ref.c[i]);
    if (!(err <= tol)) bad++; // NaN counts as bad
    maxAbsErr = Math.max(maxAbsErr, Number.isNaN(err) ? Infinity : err);
    worstRatio = Math.max(worstRatio, Number.isNaN(err) ? Infinity : err / tol);
  }
  return { ok: bad === 0, maxAbsErr, worstRatio, bad };
}
