import { crc32 as zlibCrc32 } from 'node:zlib';
import { describe, expect, it } from 'vitest';
import { crc32, crc32Tables, crc32Update } from '../../src/engine/util/crc32';
import { Rng } from '../../src/engine/util/rng';

describe('crc32 (slicing-by-16)', () => {
  it('is the IEEE CRC-32 check value', () => {
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array(0))).toBe(0);
  });

  it('equals zlib\'s on every length around the 16-byte slices, at any offset, and continues across parts', () => {
    const rng = new Rng(9);
    const buf = Uint8Array.from({ length: 300 }, () => Math.floor(rng.next() * 256));
    for (let len = 0; len <= 70; len++) {
      for (const off of [0, 1, 3]) {
        const b = buf.subarray(off, off + len);
        expect(crc32(b)).toBe(zlibCrc32(b));
        expect(crc32Tables(0, b)).toBe(zlibCrc32(b));
      }
    }
    const whole = crc32(buf);
    for (const cut of [1, 15, 16, 17, 150]) {
      expect(crc32Update(crc32(buf.subarray(0, cut)), buf.subarray(cut))).toBe(whole);
      expect(crc32Tables(crc32Tables(0, buf.subarray(0, cut)), buf.subarray(cut))).toBe(whole);
    }
  });
});
