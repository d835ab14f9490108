/**
 * Fused TACO kernels vs the TS reference (src/engine/quant/taco.ts). The GPU reproduces the
 * reference operation for operation; the one op WGSL does not round correctly is sqrt (in a), so a
 * code may flip where y/s sits on a rounding boundary: such flips are counted and bounded, and on
 * SwiftShader there are none. Both exchange paths (subgroup shuffles, workgroup memory) run where
 * the device has subgroups, and must agree bit for bit; so must every register layout (words per
 * invocation), fp32 access width (n % 4 == 0 or not), the tile loop, and the two per-element
 * encoders (the default 'split': branch-free codes then fix_ties on the near-ties; 'inline': the
 * earlier kernel), on data built to put codes on FP8 rounding boundaries and on extreme groups; and
 * the two decoders ('alu' computes each code, 'lut' looks it up), on any payload.
 */
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import {
  tacoCompress, tacoDecompress, tacoShader, tacoWordsPerInvocation, type TacoDecode, type TacoEncode, type TacoOptions,
} from '../../src/engine/kernels/taco/taco';
import { Uniforms } from '../../src/engine/gpu/runtime';
import { decodeE4M3, encodeE4M3 } from '../../src/engine/quant/fp8';
import { butterfliesF32, fwhtF32, rsqrtF32 } from '../../src/engine/quant/hadamard';
import {
  parseTacoPayload, tacoAdaptiveScale, tacoCompressRef, tacoDecompressRef, tacoLayout, tacoPayload, tacoPayloadBytes, TACO_GROUP_SIZES,
} from '../../src/engine/quant/taco';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';

interface Result {
  payload: Uint8Array;
  y: Float32Array;
}

async function roundTrip(rt: Runtime, x: Float32Array, G: number, opts: TacoOptions & { offset?: number }): Promise<Result> {
  const n = x.length;
  const bytes = tacoPayloadBytes(n, G);
  const off = opts.offset ?? 0;
  const xb = rt.upload('activations', 'taco.x', x.length ? x : new Float32Array(1));
  const pb = rt.createBuffer('comm', 'taco.payload', off + Math.max(bytes, 4));
  const yb = rt.createBuffer('activations', 'taco.y', Math.max(n, 1) * 4);
  const payload = off ? { buffer: pb, offset: off, size: Math.max(bytes, 4) } : pb;
  const common = { n, G, subgroups: opts.subgroups, shuffleOnly: opts.shuffleOnly, words: opts.words, workgroupSize: opts.workgroupSize, maxWorkgroups: opts.maxWorkgroups, encode: opts.encode, decode: opts.decode };
  rt.run([
    tacoCompress(rt, { label: 'taco.compress', x: xb, payload, ...common }),
    tacoDecompress(rt, { label: 'taco.decompress', payload, y: yb, ...common }),
  ]);
  const out = {
    payload: new Uint8Array(await rt.read(pb, off, bytes)),
    y: await rt.readF32(yb, 0, n),
  };
  for (const b of [xb, pb, yb]) rt.mem.free(b);
  return out;
}

/** GPU payload and reconstruction against the reference; returns the number of flipped codes. */
function checkAgainstRef(x: Float32Array, G: number, r: Result, label: string): number {
  const n = x.length;
  const ref = tacoCompressRef(x, G);
  const got = parseTacoPayload(r.payload, n, G);
  let flips = 0;
  for (let i = 0; i < ref.codes.length; i++) if (got.codes[i] !== ref.codes[i]) flips++;
  expect(flips, `${label}: flipped codes`).toBeLessThanOrEqual(Math.max(2, ref.codes.length / 2000));
  expectClose(got.s, ref.s, { atol: 0, rtol: 1e-6, label: `${label}: s` });
  expectClose(got.a, ref.a, { atol: 0, rtol: 1e-6, label: `${label}: a` });
  // Decompression of the GPU's own payload: same ops as the reference, so equal to a few ulps.
  const want = tacoDecompressRef(got, n, G);
  const scale = Math.max(1e-30, ...Array.from(want, Math.abs));
  expectClose(r.y, want, { atol: 1e-6 * scale, rtol: 1e-6, label: `${label}: x̂` });
  return flips;
}

function sameResult(a: Result, b: Result, label: string): void {
  expect(Array.from(a.payload), `${label}: payload`).toEqual(Array.from(b.payload));
  expect(Array.from(a.y), `${label}: x̂`).toEqual(Array.from(b.y));
}

/**
 * Elements whose y/s (the reference's fp32 quotient) lies within 16 ulps of an E4M3 midpoint, the
 * window in which the compressor recodes with code_exact: how much a test exercises that path.
 */
function nearTieCount(x: Float32Array, G: number): number {
  const mids: number[] = [];
  for (let c = 0; c < 0x7e; c++) mids.push((decodeE4M3(c) + decodeE4M3(c + 1)) / 2);
  let count = 0;
  for (let g = 0; g * G < x.length; g++) {
    const v = new Float32Array(G);
    v.set(x.subarray(g * G, Math.min(x.length, (g + 1) * G)));
    const a = tacoAdaptiveScale(v);
    for (let i = 0; i < G; i++) v[i] = v[i] * a;
    butterfliesF32(v, 0, G);
    let mx = 0;
    for (let i = 0; i < G; i++) {
      v[i] = v[i] * rsqrtF32(G);
      mx = Math.max(mx, Math.abs(v[i]));
    }
    const s = Math.fround(mx / 448);
    for (let i = 0; i < G; i++) {
      const q = Math.abs(Math.fround(v[i] / s));
      const ulp = 2 ** (Math.floor(Math.log2(Math.max(q, 2 ** -6))) - 23);
      if (mids.some((m) => Math.abs(q - m) <= 16 * ulp)) count++;
    }
  }
  return count;
}

/** Decompresses a payload given as bytes; the output as fp32 bit patterns (NaN payloads kept). */
async function decompressBits(rt: Runtime, bytes: Uint8Array, n: number, G: number, opts: TacoOptions): Promise<Uint32Array> {
  const pb = rt.upload('comm', 'taco.payload', bytes);
  const yb = rt.createBuffer('activations', 'taco.y', n * 4);
  rt.run([tacoDecompress(rt, { label: 'taco.decompress', payload: pb, y: yb, n, G, ...opts })]);
  const out = await rt.readU32(yb, 0, n);
  for (const b of [pb, yb]) rt.mem.free(b);
  return out;
}

/**
 * A payload of random codes — every code but the NaNs 0x7f / 0xff, which would spread NaN over
 * whole groups and hide any other difference — with scales s in [2^-20, 2^20) and a in
 * [1e-3, 1e3], and edge groups: the clamps (s = 1e-12 with a = 1e3, s = 1e6 with a = 1e-3), all
 * codes NaN, all ±448, all ±0.
 */
function randomPayload(n: number, G: number, seed: number): Uint8Array {
  const L = tacoLayout(n, G);
  const rng = new Rng(seed);
  const bytes = new Uint8Array(4 * L.words);
  for (let i = 0; i < L.codeWords * 4; i++) {
    const c = rng.int(254);
    bytes[i] = c >= 0x7f ? c + 1 : c;
  }
  const f32 = new Float32Array(bytes.buffer);
  for (let g = 0; g < L.groups; g++) {
    f32[L.sOff + g] = 2 ** (rng.next() * 40 - 20);
    f32[L.aOff + g] = 10 ** (rng.next() * 6 - 3);
  }
  const edges: [number, number, number[]][] = [[1e-12, 1e3, []], [1e6, 1e-3, []], [1, 1, [0x7f, 0xff]], [3, 0.5, [0x7e, 0xfe]], [1, 1, [0, 0x80]]];
  edges.forEach(([sv, av, codes], k) => {
    const g = (k * 7) % L.groups;
    f32[L.sOff + g] = sv;
    f32[L.aOff + g] = av;
    for (let i = 0; i < G && codes.length; i++) bytes[g * G + i] = codes[rng.int(codes.length)];
  });
  return bytes;
}

/** x ~ N(0, 0.02²) with every 61st element ×30: scales differ from group to group. */
function spiky(n: number, seed: number): Float32Array {
  const x = new Rng(seed).normalArray(n, 0.02);
  for (let i = 0; i < n; i += 61) x[i] *= 30;
  return x;
}

describe('TACO fused compress / decompress kernels', () => {
  const paths = [false, true];

  // n % 4 == 0 (1000, 12800) takes the vec4 access, the others the per-element one; 12800 is
  // three full tiles of the default layout and a partial fourth.
  const cases: [number, number[]][] = [
    [32, [1, 127, 129, 1000, 2 * 512 + 77]],
    [64, [129, 1000]],
    [128, [1, 127, 129, 1000, 12800]],
    [256, [127, 2 * 512 + 77]],
    [512, [1, 129, 1000]],
  ];
  it.each(cases)('G=%i matches the reference for n in %j', async (G, ns) => {
    const rt = await testRuntime();
    let flips = 0;
    for (const n of ns) {
      const x = spiky(n, G * 7919 + n);
      const results: Result[] = [];
      for (const sg of paths) {
        if (sg && !rt.gpu.features.subgroups) continue;
        const r = await roundTrip(rt, x, G, { subgroups: sg });
        flips += checkAgainstRef(x, G, r, `G=${G} n=${n} ${sg ? 'subgroups' : 'workgroup memory'}`);
        results.push(r);
      }
      if (results.length === 2) sameResult(results[1], results[0], `G=${G} n=${n} subgroup path == workgroup path`);
    }
    if (rt.gpu.adapterInfo.architecture === 'swiftshader') expect(flips).toBe(0);
  });

  // Words per invocation move index bits between registers, invocations and (beyond the subgroup
  // size) workgroup memory; none of that may change a bit. words = G/4 is one invocation per
  // group (no exchange at all), words = 1 the widest exchange (G/4 invocations).
  it.each([
    [128, 4000, [1, 2, 4, 8, 32]],
    [512, 2048, [1, 4, 128]],
  ])('G=%i n=%i: every register layout gives the same bits (words %j)', async (G, n, wordsList) => {
    const rt = await testRuntime();
    const x = spiky(n, G + n);
    const base = await roundTrip(rt, x, G, {});
    checkAgainstRef(x, G, base, `G=${G} default layout`);
    for (const words of wordsList) {
      for (const sg of paths) {
        if (sg && !rt.gpu.features.subgroups) continue;
        const r = await roundTrip(rt, x, G, { words, subgroups: sg, workgroupSize: words === 1 ? G / 4 : 64 });
        sameResult(r, base, `G=${G} words=${words} ${sg ? 'subgroups' : 'workgroup memory'}`);
      }
    }
  });

  // 1 and 2 words per invocation compute other bits on an H200 (see tacoWordsPerInvocation).
  it('default layouts hold 4 to 16 words per invocation, whole groups per invocation at most', () => {
    for (const G of TACO_GROUP_SIZES) {
      for (const entry of ['compress', 'decompress'] as const) {
        for (const n of [1, 1 << 20, 1 << 26]) {
          const w = tacoWordsPerInvocation(G, entry, n);
          expect(w >= 4 && w <= 16 && w <= G / 4 && (w & (w - 1)) === 0, `G=${G} ${entry} n=${n}: ${w}`).toBe(true);
        }
      }
    }
  });

  it('rejects layouts and bindings that do not fit', async () => {
    const rt = await testRuntime();
    const x = rt.createBuffer('activations', 'taco.bad.x', 4 * 256);
    const payload = rt.createBuffer('comm', 'taco.bad.p', tacoPayloadBytes(256, 128));
    const a = { label: 'bad', x, payload, G: 128 };
    expect(() => tacoCompress(rt, { ...a, n: 256, words: 3 })).toThrow(/power of two/);
    expect(() => tacoCompress(rt, { ...a, n: 256, words: 64 })).toThrow(/power of two/);
    expect(() => tacoCompress(rt, { ...a, n: 256, words: 1, workgroupSize: 16 })).toThrow(/workgroup size/);
    expect(() => tacoCompress(rt, { ...a, n: 256, maxWorkgroups: 0 })).toThrow(/maxWorkgroups/);
    expect(() => tacoCompress(rt, { ...a, n: 512 })).toThrow(/needs/);
    expect(() => tacoCompress(rt, { ...a, n: 2.5 })).toThrow(/element count/);
    for (const b of [x, payload]) rt.mem.free(b);
  });

  it('zero groups, non-finite inputs, the tile loop and a payload at a 256-byte offset', async () => {
    const rt = await testRuntime();
    const G = 32;
    const n = 9 * 1024 + 5; // 289 groups: several tiles at any default workgroup size, walked by 2 workgroups
    const x = new Rng(3).normalArray(n);
    x.fill(0, 128, 256); // four zero groups
    x[5] = NaN;
    x[700] = -Infinity;
    x[9000] = Infinity;
    const r = await roundTrip(rt, x, G, { maxWorkgroups: 2, offset: 256 });
    checkAgainstRef(x, G, r, 'edge cases');
    sameResult(r, await roundTrip(rt, x, G, {}), 'tile loop == one tile per workgroup');
    // Where a group's lanes fit in a subgroup, the default filters non-finite inputs only after the
    // group's square sum says so (load_checked); the per-element filter gives the same bits.
    sameResult(r, await roundTrip(rt, x, G, { shuffleOnly: false }), 'non-finite check per group == per element');
    const got = parseTacoPayload(r.payload, n, G);
    for (let i = 128; i < 256; i++) {
      expect(got.codes[i]).toBe(0);
      expect(r.y[i]).toBe(0);
    }
    expect(got.s[4]).toBe(Math.fround(1e-12));
    expect(got.a[4]).toBe(Math.fround(1e3));
    expect(Number.isFinite(r.y[5]) && Number.isFinite(r.y[700]) && Number.isFinite(r.y[9000])).toBe(true);
    // The bytes are the reference serialisation: the GPU buffer goes over the wire as is.
    expect(r.payload.length).toBe(tacoPayload(tacoCompressRef(x, G)).length);
  });

  // Groups built so that y/s lands on FP8 midpoints: x = H(t)/sqrt(G) for t drawn from the midpoints
  // of the top binade (with one ±448 fixing the max), so y = H(a·x)/sqrt(G) ≈ a·t and y/s ≈ t up to
  // fp32 rounding — within the tie window for most elements, so fix_ties runs in most invocations.
  it('groups whose codes sit on FP8 rounding boundaries: reference codes, split == inline encoder', async () => {
    const rt = await testRuntime();
    for (const G of [32, 128]) {
      const groups = 40;
      const n = groups * G - 3; // the last group partial
      const rng = new Rng(G + 5);
      const t = new Float32Array(groups * G);
      for (let g = 0; g < groups; g++) {
        for (let i = 0; i < G; i++) t[g * G + i] = (rng.next() < 0.5 ? -1 : 1) * (272 + 32 * rng.int(6)) * 2 ** (g % 7 - 3);
        t[g * G + rng.int(G)] = 448 * 2 ** (g % 7 - 3);
      }
      const x = fwhtF32(t, G).subarray(0, n);
      const near = nearTieCount(x, G);
      expect(near, `G=${G}: elements within 16 ulps of a midpoint`).toBeGreaterThan(n / 4);
      const split = await roundTrip(rt, x, G, {});
      const flips = checkAgainstRef(x, G, split, `G=${G} near ties`);
      if (rt.gpu.adapterInfo.architecture === 'swiftshader') expect(flips).toBe(0);
      sameResult(await roundTrip(rt, x, G, { encode: 'inline' }), split, `G=${G} near ties: inline == split`);
    }
  });

  // Tiny (x² underflows to 0: a clamps to 1e3), mean(x²) ≈ λ, huge (x² overflows: a clamps to 1e-3),
  // −0, constant groups (y has one nonzero: 0 codes elsewhere), near-constant ones (E4M3 subnormal
  // codes), one spike, mixed scales. Not fp32 subnormals, in the input or in the butterflies: WGSL
  // lets a GPU flush them (SwiftShader does), which can turn a code of −0 into +0 — the same value,
  // but not the same byte.
  it('extreme groups: tiny, huge, −0, constant and near-constant values give the reference codes', async () => {
    const rt = await testRuntime();
    const G = 64;
    const kinds: ((i: number, r: Rng) => number)[] = [
      (_, r) => r.normal() * 1e-30,
      (_, r) => r.normal() * 1e-3,
      (_, r) => r.normal() * 1e30,
      (_, r) => (r.next() < 0.5 ? -3e38 : 3e38),
      () => -0,
      () => 0.75,
      (_, r) => 0.75 + r.normal() * 1e-4,
      (i) => (i === 17 ? 5 : 0),
      (i, r) => (i % 2 ? 1e-20 : r.normal() * 1e20),
    ];
    const n = kinds.length * G * 3 + 1; // each kind over three groups, and a 1-element tail group
    const rng = new Rng(11);
    const x = new Float32Array(n);
    for (let i = 0; i < n - 1; i++) x[i] = kinds[Math.floor(i / (3 * G))](i % G, rng);
    x[n - 1] = -2.5;
    const r = await roundTrip(rt, x, G, {});
    const flips = checkAgainstRef(x, G, r, 'extreme groups');
    if (rt.gpu.adapterInfo.architecture === 'swiftshader') expect(flips).toBe(0);
    sameResult(await roundTrip(rt, x, G, { encode: 'inline' }), r, 'extreme groups: inline == split');
    const got = parseTacoPayload(r.payload, n, G);
    expect(got.a[3 * 3]).toBe(Math.fround(1e-3)); // the 3e38 groups: x² overflows
    // −0 groups: y = ±0 (the butterflies' differences are +0), codes 0x80 and 0x00 as in the reference.
    const negZero = Array.from(got.codes.subarray(4 * 3 * G, 5 * 3 * G));
    expect(negZero.every((c) => c === 0 || c === 0x80) && negZero.includes(0x80)).toBe(true);
    const nearConstant = got.codes.subarray(6 * 3 * G, 7 * 3 * G);
    expect(Array.from(nearConstant).some((c) => (c & 0x7f) > 0 && (c & 0x7f) < 8), 'E4M3 subnormal codes').toBe(true);
  });

  // The compressor's per-element code comes from the bits of y·(1/s) (near_codes) unless that lies
  // near an FP8 midpoint, where fix_ties recodes it with code_exact; the near case is ~1 in 30 000
  // on real data, so aim at it: y/s placed within a few ulps of midpoints (subnormal, normal, the
  // 2^-10 midpoint next to zero), grid points, the 2^-6 and 448 ends, zeros, random subnormal-range
  // and plain random quotients. The split path (fast word then fix_ties, as compress runs them, on
  // y and −y), code_exact alone, and the earlier kernel's taco_code must all give the reference code.
  it('the per-element encoders give the code of the correctly rounded quotient, at midpoints too', async () => {
    const rt = await testRuntime();
    const split = `
@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= P.n) { return; }
  let y = x[2u * i];
  let s = x[2u * i + 1u];
  let inv = 1.0 / s;
  var v: array<vec4<f32>, V>;                  // zeros elsewhere: no ties there
  v[0] = vec4<f32>(y, -y, y, -y);
  let q0 = (V + 2u) * i;                       // T = 1 here: registers at words q0 … q0 + V − 1
  for (var j = 0u; j < V; j++) { payload[q0 + j] = pack_codes(near_codes(v[j], inv), v[j]); }
  fix_ties(v, s, inv, q0);
  payload[q0 + V] = code_exact(y, s, y * inv);
  payload[q0 + V + 1u] = select(0u, 1u, has_tie(near_codes(v[0], inv)));
}`;
    const inline = `
@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < P.n) { payload[id.x] = taco_code(x[2u * id.x], x[2u * id.x + 1u], 1.0 / x[2u * id.x + 1u]); }
}`;
    const rng = new Rng(17);
    const pairs: number[] = [];
    const mids: number[] = [2 ** -10];
    const grid: number[] = [0, 2 ** -6, 448, 480, 1e-30];
    for (let c = 0; c < 0x7e; c++) {
      mids.push((decodeE4M3(c) + decodeE4M3(c + 1)) / 2);
      grid.push(decodeE4M3(c));
    }
    for (let k = 0; k < 9000; k++) {
      const s = Math.fround(2 ** (rng.next() * 40 - 20) * (1 + rng.next()));
      const sign = rng.next() < 0.5 ? -1 : 1;
      const ulps = (rng.int(17) - 8) * 2 ** -24;
      let v: number;
      if (k % 4 === 3) v = (rng.next() * 2 - 1) * 448;
      else if (k % 4 === 2) v = (rng.next() * 2 - 1) * 2 ** -6;
      else if (k % 4 === 1) v = grid[rng.int(grid.length)] * (1 + ulps) * sign;
      else v = mids[rng.int(mids.length)] * (1 + ulps) * sign;
      pairs.push(Math.fround(v * s), s);
    }
    const n = pairs.length / 2;
    const data = rt.upload('workspace', 'probe.data', Float32Array.from(pairs));
    const W = 8 + 2;
    const out = rt.createBuffer('workspace', 'probe.out', W * n * 4);
    const u = rt.uniform('probe', new Uniforms().u32(n).u32(0).u32(0).u32(0).u32(0).f32(0).f32(0));
    const probe = (encode: TacoEncode, src: string) => rt.kernel({
      label: `probe.${encode}`, code: tacoShader({ entry: 'compress', subgroups: false, vec4Io: false, words: 8, encode }) + src,
      entryPoint: 'probe', constants: { G: 32, WG: 64 }, bindings: [out, data, u], workgroups: [Math.ceil(n / 64)],
    });
    rt.run([probe('split', split)]);
    const got = await rt.readU32(out, 0, W * n);
    rt.run([probe('inline', inline)]);
    const gotInline = await rt.readU32(out, 0, n);
    const bad: string[] = [];
    let ties = 0;
    for (let i = 0; i < n; i++) {
      const y = pairs[2 * i];
      const s = pairs[2 * i + 1];
      const want = encodeE4M3(Math.max(-448, Math.min(448, Math.fround(y / s))));
      const wantWord = (want | ((want ^ 0x80) << 8) | (want << 16) | ((want ^ 0x80) << 24)) >>> 0;
      const checks: [string, number, number][] = [
        ['fast word + fix_ties (y, -y, y, -y)', got[W * i], wantWord],
        ['code_exact', got[W * i + 8], want],
        ['taco_code', gotInline[i], want],
      ];
      for (const [name, g, w] of checks) {
        if (g !== w && bad.length < 5) bad.push(`${name}: y=${y} s=${s} y/s=${y / s}: got ${g.toString(16)} want ${w.toString(16)}`);
      }
      for (let j = 1; j < 8; j++) if (got[W * i + j] !== 0 && bad.length < 5) bad.push(`word ${j} of zeros: ${got[W * i + j]}`);
      ties += got[W * i + 9];
    }
    expect(bad).toEqual([]);
    // The midpoint third must reach fix_ties (else this test would not test it).
    expect(ties).toBeGreaterThan(n / 5);
    for (const b of [data, out, u]) rt.mem.free(b);
  });

  it('decode_code equals decodeE4M3 for all 256 codes', async () => {
    const rt = await testRuntime();
    const probe = `
@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>) {
  if (id.x < P.n) { y[id.x] = decode_code(payload[id.x]); }
}`;
    const codes = rt.upload('workspace', 'probe.codes', Uint32Array.from({ length: 256 }, (_, i) => i));
    const out = rt.createBuffer('workspace', 'probe.out', 256 * 4);
    const u = rt.uniform('probe', new Uniforms().u32(256).u32(0).u32(0).u32(0).u32(0).f32(0).f32(0));
    const code = tacoShader({ entry: 'decompress', subgroups: false, vec4Io: false, words: 8 }) + probe;
    rt.run([rt.kernel({ label: 'probe', code, entryPoint: 'probe', constants: { G: 32, WG: 64 },
      bindings: [codes, out, u], workgroups: [4] })]);
    const got = await rt.readF32(out, 0, 256);
    const bad: string[] = [];
    for (let c = 0; c < 256; c++) {
      const want = decodeE4M3(c);
      if (!Object.is(got[c], want) && !(Number.isNaN(got[c]) && Number.isNaN(want))) bad.push(`code ${c}: got ${got[c]} want ${want}`);
    }
    expect(bad).toEqual([]);
    for (const b of [codes, out, u]) rt.mem.free(b);
  });
  // decode 'lut' reads the bits decode_bits gives from a table it fills per workgroup: the same
  // bits as 'alu' for all 256 codes in every byte position of a word (NaN codes keep theirs),
  // whatever the workgroup size (fewer or more invocations than table entries).
  it('decode_word: the table decoder gives the computed decoder\'s bits for every code', async () => {
    const rt = await testRuntime();
    const probe = `
@group(0) @binding(3) var<storage, read_write> bits: array<vec4<u32>>;

@compute @workgroup_size(WG)
fn probe(@builtin(global_invocation_id) id: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  decode_setup(lid);
  if (id.x < P.n) {
    let v = decode_word(payload[id.x]);
    bits[id.x] = bitcast<vec4<u32>>(v);
    y[id.x] = v.x;
  }
}`;
    // Word k holds codes k, k + 1, k + 2, k + 3 (mod 256): every code in every byte.
    const words = Uint32Array.from({ length: 256 }, (_, k) => (k | ((k + 1) & 255) << 8 | ((k + 2) & 255) << 16 | ((k + 3) & 255) << 24) >>> 0);
    const codes = rt.upload('workspace', 'probe.codes', words);
    const first = rt.createBuffer('workspace', 'probe.first', 256 * 4);
    const out = rt.createBuffer('workspace', 'probe.out', 256 * 16);
    const u = rt.uniform('probe', new Uniforms().u32(256).u32(0).u32(0).u32(0).u32(0).f32(0).f32(0));
    const run = async (decode: TacoDecode, wg: number) => {
      const code = tacoShader({ entry: 'decompress', subgroups: false, vec4Io: false, words: 8, decode }) + probe;
      rt.run([rt.kernel({ label: `probe.${decode}`, code, entryPoint: 'probe', constants: { G: 32, WG: wg },
        bindings: [codes, first, u, out], workgroups: [256 / wg] })]);
      return { bits: await rt.readU32(out, 0, 1024), first: await rt.readF32(first, 0, 256) };
    };
    const alu = await run('alu', 64);
    const bitsOf = (v: number) => new Uint32Array(Float32Array.of(v).buffer)[0];
    const want = Array.from({ length: 1024 }, (_, i) => {
      const c = ((i >> 2) + (i & 3)) & 255;
      return (c & 0x7f) === 0x7f ? (0x7fc00000 | (c & 0x80) << 24) >>> 0 : bitsOf(decodeE4M3(c));
    });
    expect(Array.from(alu.bits), 'alu: the bits of decodeE4M3 (NaN: 0x7fc00000 with the sign)').toEqual(want);
    for (const wg of [32, 64, 256]) {
      const lut = await run('lut', wg);
      expect(Array.from(lut.bits), `lut, WG=${wg}`).toEqual(Array.from(alu.bits));
      expect(Array.from(lut.first), `lut, WG=${wg}: fp32 values`).toEqual(Array.from(alu.first));
    }
    for (const b of [codes, first, out, u]) rt.mem.free(b);
  });

  // The whole decompressor with either decoder, on compressor output and on random and edge
  // payloads, across group sizes, partial last groups (n % 4 ≠ 0 takes the per-element stores),
  // exchange paths, register layouts, workgroup sizes and the tile loop: the same bits.
  it.each([32, 64, 128])('G=%i: decode lut == alu bit for bit on real, random and edge payloads', async (G) => {
    const rt = await testRuntime();
    const layouts: TacoOptions[] = [{}, { maxWorkgroups: 2 }, { words: 1, workgroupSize: G / 4 }, { words: G / 4, workgroupSize: 256 }];
    for (const n of [1, G - 1, 3 * G + 5, 1000, 40 * G]) {
      const payloads = [randomPayload(n, G, G + n), tacoPayload(tacoCompressRef(spiky(n, n + 1), G))];
      for (const [p, bytes] of payloads.entries()) {
        for (const sg of paths) {
          if (sg && !rt.gpu.features.subgroups) continue;
          for (const layout of layouts) {
            const opts = { ...layout, subgroups: sg };
            const label = `G=${G} n=${n} payload ${p ? 'compressed' : 'random'} ${JSON.stringify(opts)}`;
            const alu = await decompressBits(rt, bytes, n, G, { ...opts, decode: 'alu' });
            const lut = await decompressBits(rt, bytes, n, G, { ...opts, decode: 'lut' });
            let differ = 0;
            for (let i = 0; i < n; i++) if (alu[i] !== lut[i]) differ++;
            expect(differ, `${label}: differing output words`).toBe(0);
          }
        }
      }
      // The random payload's NaN group (group 14) decodes to NaN.
      if (n > 14 * G) expect(Array.from(await decompressBits(rt, payloads[0], n, G, {})).some((b) => (b & 0x7fffffff) > 0x7f800000)).toBe(true);
    }
  });

  it('rejects an unknown decoder', async () => {
    const rt = await testRuntime();
    const payload = rt.createBuffer('comm', 'taco.bad.p', tacoPayloadBytes(256, 128));
    const y = rt.createBuffer('activations', 'taco.bad.y', 4 * 256);
    expect(() => tacoDecompress(rt, { label: 'bad', payload, y, n: 256, G: 128, decode: 'table' as TacoDecode })).toThrow(/decode 'table'/);
    for (const b of [payload, y]) rt.mem.free(b);
  });
});
