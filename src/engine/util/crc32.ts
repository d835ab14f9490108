/**
 * CRC-32 (IEEE 802.3, reflected polynomial 0xEDB88320, init/xorout 0xFFFFFFFF) — the checksum of
 * zlib/PNG, so `crc32(ascii("123456789")) = 0xCBF43926`. Table-driven, one byte per step: frames are
 * at most tens of KiB, so the 1 KiB table beats slicing-by-8's 8 KiB for code size and is fast enough.
 */
const TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** Continues a CRC over `bytes`; start with `crc = 0` (the pre/post inversion is internal). */
export function crc32Update(crc: number, bytes: Uint8Array): number {
  let c = ~crc >>> 0;
  for (let i = 0; i < bytes.length; i++) c = TABLE[(c ^ bytes[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

export function crc32(bytes: Uint8Array): number {
  return crc32Update(0, bytes);
}
