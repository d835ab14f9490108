import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { packF16, unpackF16 } from '../../src/engine/kernels/f16/f16';
import { f16Decode, f16Encode, f16Words, packF16Ref, roundF16Ref, unpackF16Ref } from '../../src/engine/kernels/f16/f16.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { f32ToF16Bits, F16_MAX } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();
const SENTINEL = 0xdeadbeef;
const bitsOf = (x: number) => new Uint32Array(new Float32Array([x]).buffer)[0];

/** fp32 bit patterns around f16's rounding edges, range ends and special values. */
const EDGES = [
  0x3f801000, 0x3f803000, 0xbf801000, // ties (1 + 2^-11: to even, down; 1 + 3·2^-11: up), negative
  0x3f801001, 0x3f800fff, // just past / just short of a tie
  bitsOf(65504), bitsOf(-65504), bitsOf(65519), bitsOf(65520), bitsOf(-65520), bitsOf(1e6), 0x7f7fffff, // max, still max, overflow to ±Inf
  0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, // ±Inf, NaNs
  bitsOf(2 ** -24), bitsOf(-(2 ** -24)), bitsOf(2 ** -25), bitsOf(1.5 * 2 ** -25), bitsOf(3 * 2 ** -25), bitsOf(2 ** -14 - 2 ** -24), bitsOf(1023.5 * 2 ** -24), // subnormals, their ties
  bitsOf(2 ** -26), 0x00000001, 0x80000001, // below half the smallest subnormal: ±0
  0x00000000, 0x80000000, 0x3f800000, bitsOf(2 ** -14),
];

function patterns(rng: Rng, n: number): Uint32Array {
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = rng.normal() * 2 ** (rng.int(41) - 25);
  const bits = new Uint32Array(f.buffer);
  EDGES.forEach((e, i) => {
    if (i < n) bits[(i * 7) % n] = e;
  });
  return bits;
}

describe('f16 storage reference', () => {
  it('rounds as quant/f16.ts (nearest even, subnormals kept), overflows to ±Inf, keeps NaN a NaN, packs element i in bits 16·(i%2)', () => {
    for (const e of EDGES) {
      const f = new Float32Array(new Uint32Array([e]).buffer)[0];
      if (!Number.isNaN(f)) expect(f16Encode(e), `0x${e.toString(16)}`).toBe(f32ToF16Bits(f));
    }
    expect(f16Encode(0x3f801000)).toBe(0x3c00); // tie, even below
    expect(f16Encode(0x3f803000)).toBe(0x3c02); // tie, even above
    expect(f16Encode(bitsOf(65519))).toBe(0x7bff); // rounds down to the max
    expect(f16Encode(bitsOf(65520))).toBe(0x7c00); // the midpoint to 2^16: Inf, as IEEE (no saturation)
    expect(f16Encode(bitsOf(-1e6))).toBe(0xfc00);
    expect(f16Encode(0x7f800001)).toBe(0x7e00); // a NaN whose payload is all in the low bits stays NaN
    expect(f16Encode(0xffc00001)).toBe(0xfe00);
    expect(f16Encode(bitsOf(2 ** -24))).toBe(0x0001);
    expect(f16Encode(bitsOf(1.5 * 2 ** -24))).toBe(0x0002); // subnormal tie to even
    expect(f16Encode(bitsOf(2 ** -25))).toBe(0x0000);
    expect(f16Decode(0x0001)).toBe(bitsOf(2 ** -24));
    expect(f16Decode(0x83ff)).toBe(bitsOf(-1023 * 2 ** -24));
    expect(f16Decode(0x7bff)).toBe(bitsOf(F16_MAX));
    expect(f16Decode(0xfc00)).toBe(0xff800000);
    expect([...packF16Ref(new Uint32Array([0x3f800000, 0x40000000, 0xbf800000]))]).toEqual([0x40003c00, 0x0000bc00]);
    expect([...unpackF16Ref(new Uint32Array([0x40003c00, 0x0000bc00]), 3)]).toEqual([0x3f800000, 0x40000000, 0xbf800000]);
    const r = roundF16Ref(new Float32Array([1 + 2 ** -12, Math.PI]));
    expect(r[0]).toBe(1);
    expect(Math.abs(r[1] - Math.PI) / Math.PI).toBeLessThan(2 ** -11);
    // Every f16 value round-trips exactly.
    const off: number[] = [];
    for (let h = 0; h < 0x10000; h++) if (((h & 0x7c00) !== 0x7c00 || !(h & 0x3ff)) && f16Encode(f16Decode(h)) !== h) off.push(h);
    expect(off).toEqual([]);
  });
});

describe('f16 storage kernels', () => {
  let rt: Runtime;
  beforeAll(async () => {
    rt = await testRuntime();
  });

  async function roundTrip(n: number, rng: Rng): Promise<void> {
    const bits = patterns(rng, n);
    const x = up(rt, bits);
    // One word of sentinel past the codes and the output: a kernel that overruns n shows.
    const words = up(rt, new Uint32Array(f16Words(n) + 1).fill(SENTINEL));
    const out = up(rt, new Uint32Array(n + 1).fill(SENTINEL));
    rt.run([...packF16(rt, { label: 't', x, words, n }), ...unpackF16(rt, { label: 't', words, out, n })]);
    const want = packF16Ref(bits);
    const got = await rt.readU32(words);
    expect([...got.subarray(0, want.length)].map((w) => w.toString(16)), `codes n=${n}`).toEqual([...want].map((w) => w.toString(16)));
    expect(got[want.length]).toBe(SENTINEL);
    const back = await rt.readU32(out);
    expect([...back.subarray(0, n)], `unpacked n=${n}`).toEqual([...unpackF16Ref(want, n)]);
    expect(back[n]).toBe(SENTINEL);
  }

  it('packs and unpacks bit for bit the reference (rounding, subnormals, ±Inf, overflow, NaN), any n', async () => {
    const rng = new Rng(31);
    for (const n of [1, 2, 3, 5, 7, 36, 37, 1024, 4099]) await roundTrip(n, rng);
  });

  it('covers a 2-D grid (more workgroups than one grid row)', async () => {
    setGridMaxX(3);
    await roundTrip(256 * 4 * 7 + 5, new Rng(32));
  });

  it('unpacks every f16 bit pattern exactly', async () => {
    const n = 0x10000;
    const w = new Uint32Array(f16Words(n)).map((_, i) => (2 * i) | ((2 * i + 1) << 16));
    const words = up(rt, w);
    const out = track(rt.createBuffer('activations', 't', n * 4));
    rt.run(unpackF16(rt, { label: 't', words, out, n }));
    const got = await rt.readU32(out, 0, n);
    const want = unpackF16Ref(w, n);
    // NaNs: any NaN of the same sign (a device may canonicalise the payload it unpacks).
    const nan = (b: number) => (b & 0x7fffffff) > 0x7f800000;
    const bad = [...want.keys()].filter((i) => !(got[i] === want[i] || (nan(got[i]) && nan(want[i]) && got[i] >>> 31 === want[i] >>> 31)));
    expect(bad.slice(0, 8).map((i) => `${i.toString(16)}: ${got[i].toString(16)} != ${want[i].toString(16)}`)).toEqual([]);
  });

  it('refuses bindings too small for n', () => {
    const x = up(rt, new Uint32Array(8));
    const words = { buffer: up(rt, new Uint32Array(4)), size: 12 };
    expect(() => packF16(rt, { label: 'small', x, words, n: 8 })).toThrow(/words has 12 bytes, needs 16/);
  });
});
