/**
 * Packing of 8-bit and 4-bit codes into u32 words — the one layout shared by TS and WGSL
 * (`get_byte` / `get_nibble` in shaders/quant/codec.wgsl):
 *   8-bit: element i lives in word ⌊i/4⌋ at bits 8·(i mod 4)
 *   4-bit: element i lives in word ⌊i/8⌋ at bits 4·(i mod 8)
 * i.e. little-end first, so on a little-endian host the words' bytes are the codes in order (and
 * for 4-bit, byte k holds elements 2k in its low and 2k+1 in its high nibble). An incomplete last
 * word is zero-padded.
 */

export type CodeBits = 4 | 8;

export function wordsFor(n: number, bits: CodeBits): number {
  return Math.ceil(n / (32 / bits));
}

export function packCodes(codes: ArrayLike<number>, bits: CodeBits): Uint32Array {
  const per = 32 / bits;
  const mask = (1 << bits) - 1;
  const words = new Uint32Array(wordsFor(codes.length, bits));
  for (let i = 0; i < codes.length; i++) {
    words[(i / per) | 0] |= (codes[i] & mask) << (bits * (i % per));
  }
  return words;
}

export function unpackCodes(words: ArrayLike<number>, n: number, bits: CodeBits): Uint8Array {
  const per = 32 / bits;
  const mask = (1 << bits) - 1;
  if (words.length < wordsFor(n, bits)) {
    throw new Error(`unpackCodes: ${words.length} words hold fewer than ${n} ${bits}-bit codes`);
  }
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = (words[(i / per) | 0] >>> (bits * (i % per))) & mask;
  return out;
}

/** The words as a little-endian byte stream truncated to the codes' size (n or ⌈n/2⌉ bytes). */
export function codeBytes(words: Uint32Array, n: number, bits: CodeBits): Uint8Array {
  const len = Math.ceil((n * bits) / 8);
  const out = new Uint8Array(len);
  for (let k = 0; k < len; k++) out[k] = (words[k >> 2] >>> (8 * (k & 3))) & 0xff;
  return out;
}
