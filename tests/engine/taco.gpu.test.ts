/**
 * Fused TACO kernels vs the TS reference (src/engine/quant/taco.ts). The GPU reproduces the
 * reference operation for operation; the one op WGSL does not round correctly is sqrt (in a), so a
 * code may flip where y/s sits on a rounding boundary: such flips are counted and bounded, and on
 * SwiftShader there are none. Both exchange paths (subgroup shuffles, workgroup memory) run where
 * the device has subgroups, and must agree bit for bit.
 */
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { tacoCompress, tacoDecompress, tacoShader } from '../../src/engine/kernels/taco';
import { Uniforms } from '../../src/engine/gpu/runtime';
import { decodeE4M3, encodeE4M3 } from '../../src/engine/quant/fp8';
import { parseTacoPayload, tacoCompressRef, tacoDecompressRef, tacoPayload, tacoPayloadBytes } from '../../src/engine/quant/taco';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';

interface Result {
  payload: Uint8Array;
  y: Float32Array;
}

async function roundTrip(rt: Runtime, x: Float32Array, G: number, opts: { subgroups: boolean; maxGridX?: number; offset?: number }): Promise<Result> {
  const n = x.length;
  const bytes = tacoPayloadBytes(n, G);
  const off = opts.offset ?? 0;
  const xb = rt.upload('activations', 'taco.x', x.length ? x : new Float32Array(1));
  const pb = rt.createBuffer('comm', 'taco.payload', off + Math.max(bytes, 4));
  const yb = rt.createBuffer('activations', 'taco.y', Math.max(n, 1) * 4);
  const payload = off ? { buffer: pb, offset: off, size: Math.max(bytes, 4) } : pb;
  const common = { n, G, subgroups: opts.subgroups, maxGridX: opts.maxGridX };
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

describe('TACO fused compress / decompress kernels', () => {
  const paths = [false, true];

  const cases: [number, number[]][] = [
    [32, [1, 127, 129, 1000, 2 * 512 + 77]],
    [64, [129, 1000]],
    [128, [1, 127, 129, 1000]],
    [256, [127, 2 * 512 + 77]],
    [512, [1, 129, 1000]],
  ];
  it.each(cases)('G=%i matches the reference for n in %j', async (G, ns) => {
    const rt = await testRuntime();
    let flips = 0;
    for (const n of ns) {
      const rng = new Rng(G * 7919 + n);
      const x = rng.normalArray(n, 0.02);
      for (let i = 0; i < n; i += 61) x[i] *= 30; // spikes: scales differ from group to group
      const results: Result[] = [];
      for (const sg of paths) {
        if (sg && !rt.gpu.features.subgroups) continue;
        const r = await roundTrip(rt, x, G, { subgroups: sg });
        flips += checkAgainstRef(x, G, r, `G=${G} n=${n} ${sg ? 'subgroups' : 'workgroup memory'}`);
        results.push(r);
      }
      if (results.length === 2) {
        expect(Array.from(results[1].payload), 'subgroup path == workgroup path').toEqual(Array.from(results[0].payload));
        expect(Array.from(results[1].y)).toEqual(Array.from(results[0].y));
      }
    }
    if (rt.gpu.adapterInfo.architecture === 'swiftshader') expect(flips).toBe(0);
  });

  it('zero groups, non-finite inputs, a 2-D grid and a payload at a 256-byte offset', async () => {
    const rt = await testRuntime();
    const G = 32;
    const n = 9 * 128 + 5; // 37 groups, 3 tiles of 512 elements
    const x = new Rng(3).normalArray(n);
    x.fill(0, 128, 256); // four zero groups
    x[5] = NaN;
    x[700] = -Infinity;
    const r = await roundTrip(rt, x, G, { subgroups: rt.gpu.features.subgroups, maxGridX: 2, offset: 256 });
    checkAgainstRef(x, G, r, 'edge cases');
    const got = parseTacoPayload(r.payload, n, G);
    for (let i = 128; i < 256; i++) {
      expect(got.codes[i]).toBe(0);
      expect(r.y[i]).toBe(0);
    }
    expect(got.s[4]).toBe(Math.fround(1e-12));
    expect(got.a[4]).toBe(Math.fround(1e3));
    expect(Number.isFinite(r.y[5]) && Number.isFinite(r.y[700])).toBe(true);
    // The bytes are the reference serialisation: the GPU buffer goes over the wire as is.
    expect(r.payload.length).toBe(tacoPayload(tacoCompressRef(x, G)).length);
  });

  // The compressor's per-element quotient takes y·(1/s) unless it lies near an FP8 midpoint; the
  // near case is ~1 in 60 000 on real data, so aim at it: y/s placed within a few ulps of
  // midpoints (subnormal, normal, the 2^-10 midpoint next to zero), plus plain random quotients.
  it('quotient_for_e4m3 gives the code of the correctly rounded quotient, at midpoints too', async () => {
    const rt = await testRuntime();
    const probe = `
@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) id: vec3<u32>) {
  let i = id.x;
  if (i >= P.n) { return; }
  let y = data[2u * i];
  let s = data[2u * i + 1u];
  payload[i] = e4m3_encode(clamp(quotient_for_e4m3(y, s, 1.0 / s), -448.0, 448.0));
}`;
    const rng = new Rng(17);
    const pairs: number[] = [];
    const mids: number[] = [2 ** -10];
    for (let c = 0; c < 0x7e; c++) mids.push((decodeE4M3(c) + decodeE4M3(c + 1)) / 2);
    for (let k = 0; k < 6000; k++) {
      const s = Math.fround(2 ** (rng.next() * 40 - 20) * (1 + rng.next()));
      let v: number;
      if (k % 3 === 2) v = (rng.next() * 2 - 1) * 448;
      else v = mids[rng.int(mids.length)] * (1 + (rng.int(17) - 8) * 2 ** -24) * (rng.next() < 0.5 ? -1 : 1);
      pairs.push(Math.fround(v * s), s);
    }
    const n = pairs.length / 2;
    const data = rt.upload('workspace', 'probe.data', Float32Array.from(pairs));
    const out = rt.createBuffer('workspace', 'probe.out', n * 4);
    const u = rt.uniform('probe', new Uniforms().u32(n).u32(0).u32(0).u32(0).u32(0).u32(0).f32(0).f32(0));
    rt.run([rt.kernel({ label: 'probe', code: tacoShader(false) + probe, entryPoint: 'probe', constants: { G: 32, WG: 128 },
      bindings: [out, data, u], workgroups: [Math.ceil(n / 64)] })]);
    const got = await rt.readU32(out, 0, n);
    const bad: string[] = [];
    for (let i = 0; i < n; i++) {
      const y = pairs[2 * i];
      const s = pairs[2 * i + 1];
      const want = encodeE4M3(Math.max(-448, Math.min(448, Math.fround(y / s))));
      if (got[i] !== want && bad.length < 5) bad.push(`y=${y} s=${s} y/s=${y / s}: got ${got[i]} want ${want}`);
    }
    expect(bad).toEqual([]);
    for (const b of [data, out, u]) rt.mem.free(b);
  });
});
