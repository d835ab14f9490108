/** Plain-TS references of the elementwise kernels (float64 results; inputs any numeric array). */
type Arr = ArrayLike<number>;

export function addRef(a: Arr, b: Arr): Float64Array {
  const out = new Float64Array(a.length);
  for (let i = 0; i < a.length; i++) out[i] = a[i] + b[i];
  return out;
}

export function axpyRef(out: Arr, x: Arr, alpha: number): Float64Array {
  const r = Float64Array.from(out);
  for (let i = 0; i < r.length; i++) r[i] += alpha * x[i];
  return r;
}

export function fillRef(n: number, value: number): Float64Array {
  return new Float64Array(n).fill(value);
}

export function scaleRef(out: Arr, alpha: number): Float64Array {
  const r = Float64Array.from(out);
  for (let i = 0; i < r.length; i++) r[i] *= alpha;
  return r;
}
