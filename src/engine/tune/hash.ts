/** A short stable hash of text (FNV-1a over UTF-16 code units, two 32-bit lanes): the kernels' code hashes. */
export function hashText(s: string): string {
  let h1 = 0x811c9dc5;
  let h2 = 0x01000193 ^ s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 0x01000193);
    h2 = Math.imul(h2 ^ c ^ (h1 >>> 15), 0x5bd1e995);
  }
  h2 = Math.imul(h2 ^ (h2 >>> 13), 0x5bd1e995);
  return (h1 >>> 0).toString(16).padStart(8, '0') + ((h2 ^ (h2 >>> 15)) >>> 0).toString(16).padStart(8, '0');
}
