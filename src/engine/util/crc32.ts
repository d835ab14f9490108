/**
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init/xorout 0xFFFFFFFF) — the checksum of
 * zlib/PNG, so `crc32(ascii("123456789")) = 0xCBF43926`. Slicing-by-16 in plain JS (16 tables of 256 words,
 * 16 KiB): every frame of a peer group's exchange is checked, and the byte-at-a-time loop was the
 * largest host cost of a data-parallel step.
 */
const SLICES = 16;
const T = (() => {
  const t = new Uint32Array(256 * SLICES);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  for (let s = 1; s < SLICES; s++) {
    for (let n = 0; n < 256; n++) {
      const p = t[(s - 1) * 256 + n];
      t[s * 256 + n] = (p >>> 8) ^ t[p & 0xff];
    }
  }
  return t;
})();

type NativeCrc = (data: Uint8Array, value?: number) => number;
// Node's zlib.crc32 (same CRC, several times faster) where the runtime has it: the headless peer
// and the benches. Browsers have no native CRC and run the tables below.
const native: NativeCrc | undefined = (() => {
  const proc = (globalThis as { process?: { getBuiltinModule?: (id: string) => unknown } }).process;
  const z = proc?.getBuiltinModule?.('node:zlib') as { crc32?: NativeCrc } | undefined;
  return typeof z?.crc32 === 'function' ? z.crc32 : undefined;
})();

/** Continues a CRC over `bytes`; start with `crc = 0` (the pre/post inversion is internal). */
export function crc32Update(crc: number, bytes: Uint8Array): number {
  return native ? native(bytes, crc >>> 0) >>> 0 : crc32Tables(crc, bytes);
}

/** The plain-JS CRC (exported for the test that checks it against zlib's). */
export function crc32Tables(crc: number, bytes: Uint8Array): number {
  let c = ~crc >>> 0;
  const b = bytes;
  const n = b.length;
  let i = 0;
  for (; i + 16 <= n; i += 16) {
    const a = c ^ (b[i] | (b[i + 1] << 8) | (b[i + 2] << 16) | (b[i + 3] << 24));
    c = T[3840 + (a & 0xff)] ^ T[3584 + ((a >>> 8) & 0xff)] ^ T[3328 + ((a >>> 16) & 0xff)] ^ T[3072 + (a >>> 24)]
      ^ T[2816 + b[i + 4]] ^ T[2560 + b[i + 5]] ^ T[2304 + b[i + 6]] ^ T[2048 + b[i + 7]]
      ^ T[1792 + b[i + 8]] ^ T[1536 + b[i + 9]] ^ T[1280 + b[i + 10]] ^ T[1024 + b[i + 11]]
      ^ T[768 + b[i + 12]] ^ T[512 + b[i + 13]] ^ T[256 + b[i + 14]] ^ T[b[i + 15]];
  }
  for (; i < n; i++) c = T[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

export function crc32(bytes: Uint8Array): number {
  return crc32Update(0, bytes);
}
