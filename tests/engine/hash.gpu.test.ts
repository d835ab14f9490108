import { describe, expect, it } from 'vitest';
import { hashBuffers } from '../../src/engine/kernels/hash/hash';
import { finishHash, fmix32, floatsHash, hashWordsSum } from '../../src/engine/kernels/hash/hash.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

describe('weights hash (GPU against the plain-TS definition)', () => {
  it('fmix32 is murmur3\'s finalizer', () => {
    expect(fmix32(0)).toBe(0);
    expect(fmix32(1)).toBe(0x514e28b7);
    expect(fmix32(0xffffffff)).toBe(0x81f16f39);
  });

  for (const n of [1, 255, 4096, 4097, 70_001]) {
    it(`equals floatsHash, n=${n}`, async () => {
      const rt = await testRuntime();
      const x = new Rng(n).normalArray(n, 1);
      expect(await hashBuffers(rt, 'h', [{ buffer: up(rt, x), words: n }])).toBe(floatsHash(x));
    });
  }

  it('hashes several buffers as one sequence, and only the words asked for', async () => {
    const rt = await testRuntime();
    const a = new Rng(1).normalArray(5000, 1);
    const b = new Rng(2).normalArray(3001, 1);
    const padded = new Float32Array(3100);
    padded.set(b);
    padded[3050] = 7; // beyond the words hashed
    const got = await hashBuffers(rt, 'h', [{ buffer: up(rt, a), words: a.length }, { buffer: up(rt, padded), words: b.length }]);
    expect(got).toBe(floatsHash(a, b));
    const joined = new Float32Array(a.length + b.length);
    joined.set(a);
    joined.set(b, a.length);
    expect(got).toBe(floatsHash(joined));
  });

  it('runs a 2-D grid when the groups exceed one dimension', async () => {
    const rt = await testRuntime();
    const x = new Rng(3).normalArray(40_000, 1);
    setGridMaxX(3);
    try {
      expect(await hashBuffers(rt, 'h', [{ buffer: up(rt, x), words: x.length }])).toBe(floatsHash(x));
    } finally {
      setGridMaxX(null);
    }
  });

  it('changes with any one word, a swap of two words, and the length', () => {
    const x = new Rng(4).normalArray(1000, 1);
    const h = floatsHash(x);
    for (const i of [0, 1, 500, 999]) {
      const y = x.slice();
      new Uint32Array(y.buffer)[i] ^= 1;
      expect(floatsHash(y)).not.toBe(h);
    }
    const s = x.slice();
    [s[3], s[700]] = [s[700], s[3]];
    expect(floatsHash(s)).not.toBe(h);
    const z = new Float32Array(1001);
    z.set(x);
    expect(floatsHash(z)).not.toBe(h); // a trailing +0.0 word
    expect(finishHash(hashWordsSum(new Uint32Array(x.buffer)), 1000)).toBe(h);
  });

  it('refuses more words than the buffer holds', async () => {
    const rt = await testRuntime();
    await expect(hashBuffers(rt, 'h', [{ buffer: up(rt, new Float32Array(4)), words: 5 }])).rejects.toThrow(/do not fit/);
  });
});
