import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { qdq, type QdqDispatches } from '../../src/engine/kernels/qdq/qdq';
import { qdqRef } from '../../src/engine/kernels/qdq/qdq.ref';
import type { QuantSpec } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

// Every case of a batch lives in one buffer at a 256-aligned offset with a sentinel gap after it:
// all cases run in one command buffer (three pipelines in total), and the gaps catch slice overruns.
const SENTINEL = 777.25;
const FORMATS = ['int8', 'int4', 'fp8-e4m3', 'fp8-e5m2'] as const;

interface Case {
  name: string;
  spec: QuantSpec;
  x: Float32Array;
  rowLength?: number;
  seed?: number;
}

const spec = (format: QuantSpec['format'], granularity: QuantSpec['granularity'], group = 128, rounding: QuantSpec['rounding'] = 'nearest'): QuantSpec => ({
  format,
  granularity,
  group,
  rounding,
});

/** Normals with a magnitude that changes every 16 elements (2^-8 … 2^8) and edge values sprinkled in. */
function data(rng: Rng, n: number): Float32Array {
  const x = new Float32Array(n);
  let mag = 1;
  for (let i = 0; i < n; i++) {
    if (i % 16 === 0) mag = 2 ** (rng.int(17) - 8);
    x[i] = rng.normal() * mag;
  }
  if (n >= 12) {
    x[1] = NaN;
    x[3] = Infinity;
    x[5] = -Infinity;
    x[7] = 0;
    x[9] = -0;
    x[11] = -1e-30;
  }
  return x;
}

function zeroRow(x: Float32Array, r: number, len: number): Float32Array {
  x.fill(0, r * len, (r + 1) * len);
  return x;
}

function zeroColumn(x: Float32Array, c: number, cols: number): Float32Array {
  for (let i = c; i < x.length; i += cols) x[i] = 0;
  return x;
}

function casesFor(format: QuantSpec['format'], rng: Rng): Case[] {
  const t = (granularity: QuantSpec['granularity'], group = 128) => spec(format, granularity, group);
  return [
    { name: 'tensor n=1', spec: t('tensor'), x: data(rng, 1) },
    { name: 'tensor n=65', spec: t('tensor'), x: data(rng, 65) },
    { name: 'tensor n=5000 (3 partials)', spec: t('tensor'), x: data(rng, 5000) },
    { name: 'tensor zeros', spec: t('tensor'), x: new Float32Array(7) },
    { name: 'row 9x7 (zero row)', spec: t('row'), rowLength: 7, x: zeroRow(data(rng, 63), 4, 7) },
    { name: 'row 5x1', spec: t('row'), rowLength: 1, x: data(rng, 5) },
    { name: 'row 4x300', spec: t('row'), rowLength: 300, x: data(rng, 1200) },
    { name: 'column 130x3 (3 row blocks)', spec: t('column'), rowLength: 3, x: zeroColumn(data(rng, 390), 1, 3) },
    { name: 'column 3x300', spec: t('column'), rowLength: 300, x: data(rng, 900) },
    { name: 'column 1x7', spec: t('column'), rowLength: 7, x: data(rng, 7) },
    { name: 'group 32, n=65 (zero group)', spec: t('group', 32), x: zeroRow(data(rng, 65), 1, 32) },
    { name: 'group 128, n=1000', spec: t('group', 128), x: data(rng, 1000) },
    { name: 'group 512, n=700', spec: t('group', 512), x: data(rng, 700) },
  ];
}

const align = (b: number) => Math.ceil(b / 256) * 256;

/** Runs the cases in place on slices of one buffer; checks bits against qdqRef and the gaps. */
async function runBatch(rt: Runtime, cases: Case[]): Promise<Float32Array[]> {
  const offsets: number[] = [];
  let bytes = 256; // nothing at offset 0: every slice has a nonzero offset
  for (const c of cases) {
    offsets.push(bytes);
    bytes = align(bytes + c.x.length * 4) + 256;
  }
  const host = new Float32Array(bytes / 4).fill(SENTINEL);
  cases.forEach((c, k) => host.set(c.x, offsets[k] / 4));
  const buf = rt.upload('workspace', 'qdq.test', host);
  const built: QdqDispatches[] = cases.map((c, k) =>
    qdq(rt, {
      label: `t${k}`,
      x: { buffer: buf, offset: offsets[k], size: Math.max(4, c.x.length * 4) },
      n: c.x.length,
      rowLength: c.rowLength,
      spec: c.spec,
      seed: c.seed,
    }),
  );
  rt.run(built.flat());
  const got = await rt.readF32(buf);
  for (const b of built) b.destroy();
  rt.mem.free(buf);
  const outs: Float32Array[] = [];
  cases.forEach((c, k) => {
    const g = got.slice(offsets[k] / 4, offsets[k] / 4 + c.x.length);
    expectBits(g, qdqRef(c.x, c.x.length, c.spec, c.rowLength, c.seed), `${c.spec.format} ${c.spec.rounding} ${c.name}`);
    outs.push(g);
  });
  const mask = new Uint8Array(host.length);
  cases.forEach((c, k) => mask.fill(1, offsets[k] / 4, offsets[k] / 4 + c.x.length));
  const clobbered = [...got.subarray(0, host.length).keys()].filter((i) => !mask[i] && got[i] !== SENTINEL);
  expect(clobbered.slice(0, 5), 'writes outside the slices').toEqual([]);
  return outs;
}

function expectBits(got: Float32Array, want: Float32Array, label: string): void {
  const gb = new Uint32Array(got.buffer, got.byteOffset, got.length);
  const wb = new Uint32Array(want.buffer, want.byteOffset, want.length);
  const bad: string[] = [];
  for (let i = 0; i < want.length && bad.length < 6; i++) {
    if (gb[i] !== wb[i]) bad.push(`[${i}] got ${got[i]} want ${want[i]}`);
  }
  expect(bad, label).toEqual([]);
}

describe('qdq (fused fake quantization)', () => {
  let rt: Runtime;
  beforeAll(async () => {
    rt = await testRuntime();
  });

  it('matches quantizeRef → dequantizeRef bit for bit: all formats × granularities, in place on slices', async () => {
    const rng = new Rng(11);
    const cases = FORMATS.flatMap((f) => casesFor(f, rng));
    // Exact ties (s = 1): RNE must send 0.5 → 0, 1.5 → 2, 2.5 → 2, −2.5 → −2.
    const ties = Float32Array.of(127, 0.5, 1.5, 2.5, -2.5, -126.5, 3.5, -0.5);
    cases.push({ name: 'int8 ties', spec: spec('int8', 'group', 32), x: ties });
    cases.push({ name: 'int4 ties', spec: spec('int4', 'tensor'), x: ties.map((v) => (v === 127 ? 7 : v === -126.5 ? -6.5 : v)) });
    const outs = await runBatch(rt, cases);
    expect(Array.from(outs[outs.length - 2])).toEqual([127, 0, 2, 2, -2, -126, 4, 0]);
    // Sanity of the reference itself on one case: int8 error ≤ s/2 per element.
    const c = cases.find((k) => k.spec.format === 'int8' && k.name.startsWith('row 4x300'))!;
    const o = outs[cases.indexOf(c)];
    for (let r = 0; r < 4; r++) {
      const seg = c.x.subarray(r * 300, (r + 1) * 300);
      const s = Math.max(...Array.from(seg, (v) => (Number.isFinite(v) ? Math.abs(v) : 0))) / 127;
      for (let j = 0; j < 300; j++) {
        if (Number.isFinite(seg[j])) expect(Math.abs(o[r * 300 + j] - seg[j])).toBeLessThanOrEqual(s / 2 + 1e-6 * s);
      }
    }
  });

  it('stochastic rounding: matches the reference, reproducible per seed, setSeed changes the draws', async () => {
    const rng = new Rng(12);
    const grans: [QuantSpec['granularity'], number | undefined, number][] = [
      ['tensor', undefined, 3000],
      ['row', 65, 130],
      ['column', 7, 63],
      ['group', undefined, 200],
    ];
    const cases: Case[] = FORMATS.flatMap((f, fi) =>
      grans.map(([g, rowLength, n], gi) => ({
        name: `${g} n=${n}`,
        spec: spec(f, g, 32, 'stochastic'),
        rowLength,
        x: data(rng, n),
        seed: 1000 + 10 * fi + gi,
      })),
    );
    const a = await runBatch(rt, cases);
    const b = await runBatch(rt, cases);
    a.forEach((v, k) => expectBits(b[k], v, `rerun ${k}`));
    // A different seed gives different draws (checked against the reference too, in runBatch).
    const c = await runBatch(rt, cases.map((k) => ({ ...k, seed: (k.seed ?? 0) + 7 })));
    const differs = a.filter((v, k) => v.some((y, i) => !Object.is(y, c[k][i]))).length;
    expect(differs).toBeGreaterThan(cases.length / 2);
  });

  it('setSeed rewrites the seed of built dispatches', async () => {
    const x = data(new Rng(13), 300);
    const s = spec('int4', 'group', 64, 'stochastic');
    const buf = rt.upload('workspace', 'qdq.seed', x);
    const d = qdq(rt, { label: 'seed', x: buf, n: 300, spec: s, seed: 5 });
    for (const seed of [5, 6]) {
      rt.write(buf, x);
      d.setSeed(seed);
      rt.run(d);
      expectBits(await rt.readF32(buf, 0, 300), qdqRef(x, 300, s, undefined, seed), `seed ${seed}`);
    }
    d.destroy();
    rt.mem.free(buf);
  });

  it('out of place (slices of two buffers) leaves x untouched; fp32 copies or does nothing', async () => {
    const rng = new Rng(14);
    const cases: { spec: QuantSpec; n: number; rowLength?: number }[] = [
      { spec: spec('int8', 'row'), n: 65 * 3, rowLength: 65 },
      { spec: spec('fp8-e4m3', 'tensor'), n: 2500 },
      { spec: spec('int4', 'column'), n: 63, rowLength: 9 },
      { spec: spec('fp32', 'group'), n: 70 },
    ];
    for (const c of cases) {
      const x = data(rng, c.n);
      const xb = rt.upload('workspace', 'qdq.x', Float32Array.from({ length: c.n + 128 }, (_, i) => (i < 64 ? SENTINEL : x[i - 64] ?? SENTINEL)));
      const ob = rt.upload('workspace', 'qdq.out', new Float32Array(c.n + 64 + 3).fill(SENTINEL));
      const d = qdq(rt, {
        label: 'oop',
        x: { buffer: xb, offset: 256, size: c.n * 4 },
        out: { buffer: ob, offset: 256, size: c.n * 4 },
        n: c.n,
        rowLength: c.rowLength,
        spec: c.spec,
      });
      rt.run(d);
      const xs = await rt.readF32(xb, 256, c.n);
      const out = await rt.readF32(ob);
      expectBits(xs, x, `${c.spec.format} x untouched`);
      expectBits(out.subarray(64, 64 + c.n), qdqRef(x, c.n, c.spec, c.rowLength), `${c.spec.format} ${c.spec.granularity} out`);
      expect(out[63]).toBe(SENTINEL);
      expect(out[64 + c.n]).toBe(SENTINEL);
      d.destroy();
      rt.mem.free(xb);
      rt.mem.free(ob);
    }
    const buf = rt.upload('workspace', 'qdq.fp32', new Float32Array(4));
    expect(qdq(rt, { label: 'noop', x: buf, n: 4, spec: spec('fp32', 'tensor') })).toHaveLength(0);
    rt.mem.free(buf);
  });

  it('rejects bad shapes and aliasing slices', async () => {
    const buf = rt.upload('workspace', 'qdq.bad', new Float32Array(256));
    expect(() => qdq(rt, { label: 'bad', x: buf, n: 10, rowLength: 3, spec: spec('int8', 'row') })).toThrow(/whole rows/);
    expect(() => qdq(rt, { label: 'bad', x: buf, n: 10, spec: spec('int8', 'column') })).toThrow(/rowLength/);
    expect(() => qdq(rt, { label: 'bad', x: buf, n: 300, spec: spec('int8', 'tensor') })).toThrow(/bytes/);
    expect(() =>
      qdq(rt, { label: 'bad', x: { buffer: buf, offset: 0, size: 256 }, out: { buffer: buf, offset: 256, size: 256 }, n: 64, spec: spec('int8', 'tensor') }),
    ).toThrow(/different buffers/);
    rt.mem.free(buf);
  });
});

describe('qdq skipIf (a step the loss scaler skips)', () => {
  it('quantizes as usual when found_inf (word 2) is 0 and leaves x bit-identical when it is set, row and tensor granularity', async () => {
    const rt = await testRuntime();
    const rng = new Rng(9);
    for (const [g, rowLength] of [['row', 64], ['tensor', undefined]] as const) {
      const x = data(rng, 64 * 40);
      const s = spec('int8', g);
      const want = qdqRef(x, x.length, s, rowLength);
      for (const found of [0, 1]) {
        const buf = rt.upload('workspace', 'test.qdq.skip.x', x);
        const state = rt.upload('workspace', 'test.qdq.skip.state', Uint32Array.of(0, 0, found, 0, 0, 0, 0, 0));
        const k = qdq(rt, { label: 'test.qdq.skip', x: buf, n: x.length, rowLength, spec: s, skipIf: state });
        rt.run([...k]);
        const got = await rt.readF32(buf, 0, x.length);
        const expected = found ? x : want;
        expect(new Uint32Array(got.buffer), `${g} found_inf ${found}`).toEqual(new Uint32Array(Float32Array.from(expected).buffer));
        k.destroy();
        rt.mem.free(buf);
        rt.mem.free(state);
      }
    }
  });
});
