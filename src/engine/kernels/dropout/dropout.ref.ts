/** Plain-TS twin of dropout.wgsl (same hash, threshold and scale), for tests. */
export function hash32(v: number): number {
  let h = v >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d) >>> 0;
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b) >>> 0;
  h ^= h >>> 16;
  return h >>> 0;
}

export const dropoutThreshold = (p: number): number => Math.min(0xffffffff, Math.round(p * 2 ** 32));

export function dropoutMaskRef(n: number, seed: number, p: number): Uint8Array {
  const t = dropoutThreshold(p);
  const hs = hash32(seed);
  const m = new Uint8Array(n);
  for (let i = 0; i < n; i++) m[i] = hash32((i ^ hs) >>> 0) >= t ? 1 : 0;
  return m;
}

/** out = x ⊙ mask / (1 − p) in float32 (the kernel's product). */
export function dropoutRef(x: Float32Array, seed: number, p: number): Float32Array {
  const m = dropoutMaskRef(x.length, seed, p);
  const s = Math.fround(1 / (1 - p));
  return x.map((v, i) => (m[i] ? Math.fround(v * s) : 0));
}
