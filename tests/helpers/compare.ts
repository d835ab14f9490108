import { expect } from 'vitest';

type Arr = ArrayLike<number>;

/**
 * llm.c-style check: |a - b| <= atol + rtol*|b| elementwise; on failure, prints the first mismatches
 * and the worst error so a broken kernel is diagnosable from the test log alone.
 */
export function expectClose(actual: Arr, expected: Arr, opts: { atol?: number; rtol?: number; label?: string } = {}): void {
  const atol = opts.atol ?? 1e-5;
  const rtol = opts.rtol ?? 1e-4;
  expect(actual.length, `${opts.label ?? ''} length`).toBe(expected.length);
  const bad: string[] = [];
  let worst = 0;
  let worstAt = -1;
  for (let i = 0; i < expected.length; i++) {
    const a = actual[i];
    const b = expected[i];
    const err = Math.abs(a - b);
    const tol = atol + rtol * Math.abs(b);
    if (!(err <= tol) || Number.isNaN(a) !== Number.isNaN(b)) {
      if (bad.length < 8) bad.push(`[${i}] got ${a} want ${b} (err ${err.toExponential(2)}, tol ${tol.toExponential(2)})`);
      if (!(err <= worst)) {
        worst = err;
        worstAt = i;
      }
    }
  }
  if (bad.length) {
    throw new Error(`${opts.label ?? 'arrays'} differ (worst at ${worstAt}: ${worst}):\n  ${bad.join('\n  ')}`);
  }
}

export function maxAbsDiff(a: Arr, b: Arr): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** The largest elementwise difference relative to b's largest magnitude (one figure for a whole tensor). */
export function maxRel(a: Arr, b: Arr): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return num / den;
}

/** Two steps' outcomes bit for bit: a finite loss, the same loss, every gradient the same (the first that differs named). */
export function expectSameStep(got: { loss: number; grads: Arr }, ref: { loss: number; grads: Arr }): void {
  expect(Number.isFinite(got.loss)).toBe(true);
  expect(got.loss).toBe(ref.loss);
  const diff = Array.prototype.findIndex.call(got.grads, (g: number, i: number) => !Object.is(g, ref.grads[i]));
  expect(diff, `gradient ${diff}: ${got.grads[diff]} vs ${ref.grads[diff]}`).toBe(-1);
}
