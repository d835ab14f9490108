import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { packBf16, unpackBf16 } from '../../src/engine/kernels/bf16/bf16';
import { bf16Encode, bf16Words, packBf16Ref, roundBf16Ref, unpackBf16Ref } from '../../src/engine/kernels/bf16/bf16.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();
const SENTINEL = 0xdeadbeef;

/** fp32 bit patterns around every rounding edge, then random normals of varied magnitude. */
const EDGES = [
  0x3f808000, 0x3f818000, 0xbf808000, 0xbf818000, // ties: to even (down), to even (up), negative
  0x3f808001, 0x3f807fff, // just past / just short of a tie
  0x7fc00000, 0xffc00001, 0x7f800001, 0x7fa00000, // NaNs: quiet, negative, signalling with low payload only
  0x7f800000, 0xff800000, 0x7f7fffff, 0xff7fffff, // ±Inf, ±max finite (rounds to ±Inf)
  0x00000001, 0x00008000, 0x00018000, 0x007fffff, 0x80000001, 0x807fffff, // subnormals (the last ones round to ±min normal)
  0x00000000, 0x80000000, 0x3f800000, 0x00800000,
];

function patterns(rng: Rng, n: number): Uint32Array {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = rng.normal() * 2 ** (rng.int(41) - 20);
  const bits = new Uint32Array(f.buffer);
  EDGES.forEach((e, i) => {
    if (i < n) bits[(i * 7) % n] = e;
  });
  return bits;
}

describe('bf16 reference', () => {
  it('rounds to nearest even, keeps NaN and Inf, and packs element i in bits 16·(i%2)', () => {
    expect(bf16Encode(0x3f808000)).toBe(0x3f80); // tie, even below
    expect(bf16Encode(0x3f818000)).toBe(0x3f82); // tie, even above
    expect(bf16Encode(0x3f808001)).toBe(0x3f81);
    expect(bf16Encode(0x7f7fffff)).toBe(0x7f80);
    expect(bf16Encode(0xff800000)).toBe(0xff80);
    expect(bf16Encode(0x7f800001)).toBe(0x7fc0); // a NaN whose payload is all in the low bits stays NaN
    expect(bf16Encode(0xffc00001)).toBe(0xffc0);
    expect(bf16Encode(0x00008000)).toBe(0x0000); // subnormal tie to even
    expect(bf16Encode(0x007fffff)).toBe(0x0080);
    expect([...packBf16Ref(new Uint32Array([0x3f800000, 0x40000000, 0xbf800000]))]).toEqual([0x40003f80, 0x0000bf80]);
    expect([...unpackBf16Ref(new Uint32Array([0x40003f80, 0x0000bf80]), 3)]).toEqual([0x3f800000, 0x40000000, 0xbf800000]);
    const r = roundBf16Ref(new Float32Array([1 + 2 ** -9, Math.PI]));
    expect(r[0]).toBe(1);
    expect(Math.abs(r[1] - Math.PI) / Math.PI).toBeLessThan(2 ** -8);
  });
});

describe('bf16 kernels', () => {
  let rt: Runtime;
  beforeAll(async () => {
    rt = await testRuntime();
  });

  async function roundTrip(n: number, rng: Rng): Promise<void> {
    const bits = patterns(rng, n);
    const x = up(rt, bits.length ? bits : new Uint32Array(1));
    // One word of sentinel past the codes and the output: a kernel that overruns n shows.
    const words = up(rt, new Uint32Array(bf16Words(n) + 1).fill(SENTINEL));
    const out = up(rt, new Uint32Array(n + 1).fill(SENTINEL));
    rt.run([...packBf16(rt, { label: 't', x, words, n }), ...unpackBf16(rt, { label: 't', words, out, n })]);
    const want = packBf16Ref(bits);
    const got = await rt.readU32(words);
    expect([...got.subarray(0, want.length)], `codes n=${n}`).toEqual([...want]);
    expect(got[want.length]).toBe(SENTINEL);
    const back = await rt.readU32(out);
    expect([...back.subarray(0, n)], `unpacked n=${n}`).toEqual([...unpackBf16Ref(want, n)]);
    expect(back[n]).toBe(SENTINEL);
  }

  it('packs and unpacks bit for bit the reference, any n (odd, not a multiple of 4)', async () => {
    const rng = new Rng(11);
    for (const n of [1, 2, 3, 4, 5, 6, 7, 26, 29, 1024, 4099]) await roundTrip(n, rng);
  });

  it('covers a 2-D grid (more workgroups than one grid row)', async () => {
    setGridMaxX(3);
    await roundTrip(256 * 4 * 7 + 5, new Rng(12));
  });

  it('unpacks arbitrary words exactly (bf16 → fp32 is a shift)', async () => {
    const rng = new Rng(13);
    const n = 1001;
    const w = new Uint32Array(bf16Words(n)).map(() => rng.int(0x10000) | (rng.int(0x10000) << 16));
    const words = up(rt, w);
    const out = track(rt.createBuffer('activations', 't', n * 4));
    rt.run(unpackBf16(rt, { label: 't', words, out, n }));
    expect([...(await rt.readU32(out, 0, n))]).toEqual([...unpackBf16Ref(w, n)]);
  });

  it('refuses bindings too small for n', () => {
    const x = up(rt, new Uint32Array(8));
    const words = { buffer: up(rt, new Uint32Array(4)), size: 12 };
    expect(() => packBf16(rt, { label: 'small', x, words, n: 8 })).toThrow(/words has 12 bytes, needs 16/);
    expect(() => unpackBf16(rt, { label: 'small', words, out: x, n: 6 })).not.toThrow();
  });
});
