/**
 * Counter-based uniforms for stochastic rounding, identical in TS and WGSL (`pcg_hash`,
 * `sr_uniform` in shaders/quant/codec.wgsl): the draw for element i depends only on (seed, i), so
 * the GPU and this reference produce the same codes, in any order and with any parallelism.
 *
 * pcg_hash is the PCG-RXS-M-XS 32-bit output permutation (Jarzynski & Olano, "Hash Functions for
 * GPU Rendering", 2020). Seed and index are hashed separately and the XOR hashed again, so nearby
 * indices and nearby seeds both decorrelate.
 */

export function pcgHash(v: number): number {
  const state = (Math.imul(v >>> 0, 747796405) + 2891336453) >>> 0;
  const word = Math.imul(((state >>> ((state >>> 28) + 4)) ^ state) >>> 0, 277803737) >>> 0;
  return ((word >>> 22) ^ word) >>> 0;
}

export function srBits(seed: number, index: number): number {
  return pcgHash((pcgHash(seed >>> 0) ^ pcgHash(index >>> 0)) >>> 0);
}

/**
 * u ∈ (0, 1) on the grid (k + ½)·2^-23, k < 2^23: exact in fp32 on both sides, and never 0, so a
 * zero (or flushed-subnormal) fractional part never rounds up — GPU and TS agree even where a GPU
 * flushes subnormals. P(u < f) differs from f by at most 2^-24.
 */
export function srUniform(seed: number, index: number): number {
  return ((srBits(seed, index) >>> 9) + 0.5) * 2 ** -23;
}
