/**
 * The f32 → f16 operand cast (kernels/matmul-f16/cast.ts) against the exact TS conversion
 * (quant/f16.ts, round to nearest even): pack2x16float needs no shader-f16, so this runs on SwiftShader.
 */
import { describe, expect, it } from 'vitest';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { castF16Operand, castF16Segments, type F16CastSegment, f16Bytes, f16OperandBytes, MAX_F16_CAST_SEGMENTS } from '../../src/engine/kernels/matmul-f16/cast';
import { F16_MIN_NORMAL, f16BitsToF32, f32ArrayToF16 } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const bufs = trackBuffers();

describe('castF16Operand', () => {
  const special = [0, -0, 1, -1, 0.1, 65504, -65504, 65519, 65520, -65520, 70000, -1e9, Infinity, -Infinity, NaN, 1e-8, -3e-6, 6.2e-5, 2049, 3.14159];
  const values = (n: number, seed: number) => {
    const rng = new Rng(seed);
    return Float32Array.from({ length: n }, (_, i) => special[i] ?? (rng.next() * 2 - 1) * 10 ** Math.floor(rng.next() * 8 - 4));
  };

  // n 1000: the vec4 storage pack (one workgroup of quads); n 1001: the scalar pass (2 workgroups of pairs).
  it.each([[1000, 1], [1001, 2]])('n %i (%i workgroups): round-to-nearest f16 (WGSL may round either way: within one ulp, subnormals maybe flushed), Inf and NaN exactly, an odd n\'s last high half 0', async (n, groups) => {
    const rt = await testRuntime();
    const x = values(n, 7);
    const xb = bufs.up(rt, x);
    const ob = bufs.up(rt, new Uint32Array(f16Bytes(n) / 4 + 1).fill(0xa5a5a5a5));
    const d = castF16Operand(rt, { label: 'cast', x: xb, out: ob, n });
    expect([d.label, d.workgroups]).toEqual(['cast[f32→f16]', [groups, 1, 1]]);
    rt.run([d]);
    const words = new Uint32Array(await rt.read(ob));
    expect(words[f16Bytes(n) / 4], 'nothing past the words').toBe(0xa5a5a5a5);
    const got = Uint16Array.from({ length: n }, (_, i) => (words[i >> 1] >>> (16 * (i & 1))) & 0xffff);
    const want = f32ArrayToF16(x);
    if (n % 2) expect((words[n >> 1] >>> 16) & 0xffff, 'odd n: the last high half').toBe(0);
    const bad: string[] = [];
    for (let i = 0; i < n; i++) {
      const g = got[i];
      const w = want[i];
      if (Number.isNaN(x[i])) {
        if ((g & 0x7c00) !== 0x7c00 || !(g & 0x3ff)) bad.push(`${i}: NaN -> ${g.toString(16)}`);
        continue;
      }
      const exact = !Number.isFinite(x[i]) || Math.abs(x[i]) >= 65504;
      const near = (g & 0x8000) === (w & 0x8000) && Math.abs((g & 0x7fff) - (w & 0x7fff)) <= 1;
      const flushed = Math.abs(x[i]) < F16_MIN_NORMAL && (g & 0x7fff) === 0;
      if (exact ? g !== w : !(near || flushed)) bad.push(`${i}: ${x[i]} -> ${g.toString(16)}, want ${w.toString(16)}`);
    }
    expect(bad).toEqual([]);
    expect([got[7], got[8], got[9], got[12]]).toEqual([0x7bff, 0x7c00, 0xfc00, 0x7c00]); // 65519, 65520, -65520, Inf
  });

  it('the vec4 pass writes the scalar pass\'s words bit for bit (Inf/NaN included), and the twin stores each of those halves as its f32', async () => {
    const rt = await testRuntime();
    const x = values(1000, 8);
    const xb = bufs.up(rt, x);
    const cast = async (n: number, elem: 'f16' | 'f32') => {
      const out = bufs.up(rt, new Uint32Array(f16OperandBytes(n, elem === 'f32') / 4));
      const d = castF16Operand(rt, { label: 'op', x: xb, out, n, elem });
      rt.run([d]);
      return { groups: d.workgroups[0], words: new Uint32Array(await rt.read(out)) };
    };
    const vec4 = await cast(1000, 'f16');
    expect(vec4.groups, 'n 1000: quads').toBe(1);
    // 998 and 999 values (n % 4 of 2 and 3): the scalar pass, pairs, the same x.
    for (const n of [998, 999]) {
      const scalar = await cast(n, 'f16');
      expect(scalar.groups, `n ${n}: pairs`).toBe(2);
      const whole = n >> 1;
      expect(Array.from(scalar.words.subarray(0, whole)), `n ${n}`).toEqual(Array.from(vec4.words.subarray(0, whole)));
      if (n % 2) expect(scalar.words[whole], 'the odd value alone in its word').toBe(vec4.words[whole] & 0xffff);
    }
    const halves = Uint16Array.from({ length: 1000 }, (_, i) => (vec4.words[i >> 1] >>> (16 * (i & 1))) & 0xffff);
    const twin = new Float32Array((await cast(1000, 'f32')).words.buffer);
    const bad = [...halves.keys()].filter((i) => {
      const want = f16BitsToF32(halves[i]);
      return Number.isNaN(want) ? !Number.isNaN(twin[i]) : !Object.is(twin[i], want);
    });
    expect(bad.map((i) => `${i}: ${x[i]} -> ${twin[i]}, half ${halves[i].toString(16)}`)).toEqual([]);
    expect(() => castF16Operand(rt, { label: 'bad', x: xb, out: bufs.up(rt, new Uint32Array(4)), n: 0 })).toThrow(/invalid element count 0/);
    expect(() => castF16Operand(rt, { label: 'bad', x: xb, out: bufs.up(rt, new Uint32Array(4)), n: 1000 })).toThrow(/out/);
  });

  describe('castF16Segments', () => {
    const special = [0, -0, 1, 65504, 65519, 65520, -65520, 70000, Infinity, -Infinity, NaN, 1e-8, -3e-6, 6.2e-5];
    const values = (n: number, seed: number) => {
      const rng = new Rng(seed);
      // Specials every 7th value, so each segment's first and last quads hold some.
      return Float32Array.from({ length: n }, (_, i) => (i % 7 === 3 ? special[(i / 7) % special.length | 0] : (rng.next() * 2 - 1) * 10 ** Math.floor(rng.next() * 8 - 4)));
    };
    const SENTINEL = 0xa5a5a5a5;
    const filled = (rt: Awaited<ReturnType<typeof testRuntime>>, bytes: number) => bufs.up(rt, new Uint32Array(Math.ceil(bytes / 16) * 4).fill(SENTINEL));

    it.each(['f16', 'f32'] as const)('elem %s: each segment castF16Operand\'s words bit for bit (odd sizes, offsets apart, Inf/NaN), nothing else written; one dispatch on a 2-D grid', async (elem) => {
      const rt = await testRuntime();
      // Sizes of every n % 4 and across workgroups (1024 values each); the last ends at x's last value (a partial vec4).
      const segments: F16CastSegment[] = [
        { src: 8, dst: 0, n: 1 }, { src: 12, dst: 4, n: 2 }, { src: 20, dst: 12, n: 3 }, { src: 64, dst: 20, n: 4 },
        { src: 100, dst: 2052, n: 2055 }, { src: 2160, dst: 32, n: 1030 }, { src: 4000, dst: 1100, n: 7 },
      ];
      const x = values(4000 + 7, 11);
      const xb = bufs.up(rt, x);
      const outBytes = f16OperandBytes(2052 + 2055, elem === 'f32') + 64;
      const out = filled(rt, outBytes);
      setGridMaxX(3); // 10 workgroups (1 + 1 + 1 + 1 + 3 + 2 + 1): a [3, 4] grid, its last 2 idle
      const ds = castF16Segments(rt, { label: 'seg', x: xb, out, segments, elem });
      expect(ds.map((d) => [d.label, d.workgroups])).toEqual([['seg[f32→f16]', [3, 4, 1]]]);
      rt.run(ds);
      const got = new Uint32Array(await rt.read(out));
      const untouched = new Set(got.keys());
      for (const g of segments) {
        // The reference: castF16Operand of the segment's values alone, into a sentinel-filled buffer.
        const bytes = f16OperandBytes(g.n, elem === 'f32');
        const ref = filled(rt, bytes + 16);
        rt.run([castF16Operand(rt, { label: 'ref', x: bufs.up(rt, x.slice(g.src, g.src + g.n)), out: ref, n: g.n, elem })]);
        const want = new Uint32Array(await rt.read(ref));
        const at = (g.dst * (elem === 'f32' ? 4 : 2)) / 4;
        expect(Array.from(got.subarray(at, at + bytes / 4)), JSON.stringify(g)).toEqual(Array.from(want.subarray(0, bytes / 4)));
        expect(want[bytes / 4], 'the reference writes no further').toBe(SENTINEL);
        for (let i = at; i < at + bytes / 4; i++) untouched.delete(i);
      }
      expect([...untouched].filter((i) => got[i] !== SENTINEL), 'words outside the segments').toEqual([]);
      expect(got.some((w, i) => !untouched.has(i) && w !== SENTINEL && w !== 0)).toBe(true);
    });

    it('more segments than one dispatch takes: chunked, the same words as one cast over the values they tile', async () => {
      const rt = await testRuntime();
      const sizes = Array.from({ length: MAX_F16_CAST_SEGMENTS + 9 }, (_, i) => 4 * (1 + (i % 3)));
      const segments: F16CastSegment[] = [];
      let at = 0;
      for (const n of sizes) {
        segments.push({ src: at, dst: at, n });
        at += n;
      }
      const x = values(at, 12);
      const xb = bufs.up(rt, x);
      const [a, b] = [0, 1].map(() => filled(rt, f16Bytes(at)));
      const ds = castF16Segments(rt, { label: 'seg', x: xb, out: a, segments: segments.reverse() });
      expect(ds.length).toBe(2);
      rt.run([...ds, castF16Operand(rt, { label: 'ref', x: xb, out: b, n: at })]);
      expect(Array.from(new Uint32Array(await rt.read(a)))).toEqual(Array.from(new Uint32Array(await rt.read(b))));
    });

    it('bad segments are refused', async () => {
      const rt = await testRuntime();
      const xb = bufs.up(rt, new Float32Array(64));
      const out = filled(rt, 256);
      const cast = (segments: F16CastSegment[]) => () => castF16Segments(rt, { label: 'seg', x: xb, out, segments });
      expect(cast([{ src: 2, dst: 0, n: 4 }])).toThrow(/bad cast segment/);
      expect(cast([{ src: 0, dst: 0, n: 0 }])).toThrow(/bad cast segment/);
      expect(cast([{ src: 0, dst: 0, n: 5 }, { src: 8, dst: 4, n: 4 }])).toThrow(/overlap/);
      expect(cast([{ src: 60, dst: 0, n: 8 }])).toThrow(/x has 256 bytes, needs 272/);
      expect(cast([{ src: 0, dst: 0, n: 4 }])()).toHaveLength(1);
    });
  });
});
