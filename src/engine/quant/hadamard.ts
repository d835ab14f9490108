/**
 * Normalised Sylvester fast Walsh–Hadamard transform, y = H_G x / sqrt(G), over contiguous groups of
 * G = 2^k elements. H_G/sqrt(G) is orthonormal and symmetric, so the transform is its own inverse.
 *
 * Two flavours:
 * - `fwhtF32` rounds to fp32 after every butterfly, in the exact stage order the GPU kernels use
 *   (strides 1, 2, 4, … ascending; in-place (u, v) → (u + v, u − v)), then multiplies by the fp32
 *   constant `rsqrtF32(G)`. Because each stage is elementwise-defined and fp32 +, −, × are correctly
 *   rounded in WGSL, the GPU reproduces these values bit for bit (barring FMA contraction by a
 *   driver, which tests bound).
 * - `fwhtF64` is the float64 mathematical transform, for error analysis and references.
 */

const f = Math.fround;

export function isPow2(g: number): boolean {
  return Number.isInteger(g) && g >= 1 && (g & (g - 1)) === 0;
}

/** fp32 value of 1/sqrt(G); for G = 4^k it is an exact power of two. */
export function rsqrtF32(g: number): number {
  return f(1 / Math.sqrt(g));
}

/** In-place unnormalised butterflies over one group at `off`, fp32 rounding after each op. */
export function butterfliesF32(a: Float32Array, off: number, g: number): void {
  for (let h = 1; h < g; h <<= 1) {
    for (let i = 0; i < g; i += h << 1) {
      for (let j = off + i; j < off + i + h; j++) {
        const u = a[j];
        const v = a[j + h];
        a[j] = u + v; // Float32Array stores round to fp32
        a[j + h] = u - v;
      }
    }
  }
}

/** Normalised transform of every contiguous group of `g` in `x` (length a multiple of g), fp32. */
export function fwhtF32(x: Float32Array, g: number): Float32Array {
  if (!isPow2(g)) throw new Error(`fwht: group size ${g} is not a power of two`);
  if (x.length % g !== 0) throw new Error(`fwht: length ${x.length} is not a multiple of ${g}`);
  const y = new Float32Array(x);
  const r = rsqrtF32(g);
  for (let off = 0; off < y.length; off += g) {
    butterfliesF32(y, off, g);
    for (let j = off; j < off + g; j++) y[j] = f(y[j] * r);
  }
  return y;
}

/** Float64 normalised transform (mathematical H_G x / sqrt(G)) per contiguous group. */
export function fwhtF64(x: ArrayLike<number>, g: number): Float64Array {
  if (!isPow2(g)) throw new Error(`fwht: group size ${g} is not a power of two`);
  if (x.length % g !== 0) throw new Error(`fwht: length ${x.length} is not a multiple of ${g}`);
  const y = Float64Array.from(x);
  const r = 1 / Math.sqrt(g);
  for (let off = 0; off < y.length; off += g) {
    for (let h = 1; h < g; h <<= 1) {
      for (let i = 0; i < g; i += h << 1) {
        for (let j = off + i; j < off + i + h; j++) {
          const u = y[j];
          const v = y[j + h];
          y[j] = u + v;
          y[j + h] = u - v;
        }
      }
    }
    for (let j = off; j < off + g; j++) y[j] *= r;
  }
  return y;
}

/** Entry (i, j) of the unnormalised Sylvester matrix: (−1)^popcount(i & j). */
export function hadamardEntry(i: number, j: number): number {
  let b = i & j;
  let p = 0;
  while (b) {
    p ^= 1;
    b &= b - 1;
  }
  return p ? -1 : 1;
}
