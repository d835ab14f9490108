/**
 * The weights hash every member of a group compares after a step (kernel: ./hash.ts, src/engine/kernels/hash/hash.wgsl):
 * a sum over the words of fmix32(word ^ index·φ) mod 2^32, finished with the length. A sum, unlike a
 * CRC, splits over any number of GPU workgroups; fmix32 is a bijection, so changing any one word
 * always changes the hash.
 */
export function fmix32(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The unfinished sum of `words` placed at word index `base` of the hashed sequence. */
export function hashWordsSum(words: Uint32Array, base = 0): number {
  let s = 0;
  for (let i = 0; i < words.length; i++) s = (s + fmix32(words[i] ^ Math.imul(base + i, 0x9e3779b1))) >>> 0;
  return s;
}

/** The hash of a sequence of `n` words whose sum (of every part, mod 2^32) is `sum`. */
export function finishHash(sum: number, n: number): number {
  return fmix32((sum ^ Math.imul(n >>> 0, 0x27d4eb2f) ^ Math.floor(n / 2 ** 32)) >>> 0);
}

/** The hash of float arrays taken one after the other (their bits, as words). */
export function floatsHash(...parts: Float32Array[]): number {
  let sum = 0;
  let n = 0;
  for (const p of parts) {
    sum = (sum + hashWordsSum(new Uint32Array(p.buffer, p.byteOffset, p.length), n)) >>> 0;
    n += p.length;
  }
  return finishHash(sum, n);
}
