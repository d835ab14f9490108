/**
 * The one-dispatch quantizer / dequantizer (src/engine/kernels/quantize/group.wgsl) against quantizeRef and
 * dequantizeRef, code for code: every format, groups of 32..256 and rows, tails that cut a group,
 * a word and a workgroup tile, zero and sub-threshold groups, huge and tiny values, values on and
 * next to every rounding boundary, with subgroup shuffles and with the workgroup-memory exchange.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import {
  buildDequantize,
  buildQuantize,
  fusedDequantizeSegment,
  fusedQuantizeLayout,
  type QuantizePathOptions,
  type QuantizeSpec,
} from '../../src/engine/kernels/quantize/quantize';
import { decodeE4M3, decodeE5M2 } from '../../src/engine/quant/fp8';
import { QMAX, QUANT_FORMATS, type QuantFormat } from '../../src/engine/quant/formats';
import { dequantizeRef, type Granularity, type QuantizeOptions, quantizeRef } from '../../src/engine/quant/quantizer';
import { dequantizeF16Ref } from '../../src/engine/kernels/quantize/quantize.ref';
import { f16BitsToF32, f32ToF16Bits } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

let rt: Runtime;
beforeAll(async () => {
  rt = await testRuntime();
});

const f32 = Math.fround;
const bitsOf = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0];
const fromBits = (b: number) => new Float32Array(Uint32Array.of(b >>> 0).buffer)[0];

/** The rounding boundaries of a format in code space (x/s), positive and negative: INT half-integers, FP8 midpoints. */
function boundaries(fmt: QuantFormat): number[] {
  const out: number[] = [];
  if (fmt === 'int8' || fmt === 'int4') {
    for (let k = -QMAX[fmt] - 1; k < QMAX[fmt]; k++) out.push(k + 0.5);
  } else {
    const dec = fmt === 'fp8-e4m3' ? decodeE4M3 : decodeE5M2;
    for (let c = 0; c < 0x7f; c++) {
      const a = dec(c);
      const b = dec(c + 1);
      if (Number.isFinite(a) && Number.isFinite(b) && b <= QMAX[fmt]) out.push((a + b) / 2, -(a + b) / 2);
    }
  }
  return out;
}

/**
 * n values in groups of G, one kind of trouble per group, cycling: ordinary data with outliers,
 * all zeros, everything below the 2^-110 scale threshold, values near FLT_MAX, tiny normals,
 * boundaries hit exactly (s a power of two, so x/s is exact: ties to even) and boundaries missed by
 * a few ulps of x/s (s arbitrary: the quotients land in the fast path's guard band), and non-finite
 * values and −0.
 */
function troubleData(n: number, G: number, fmt: QuantFormat, seed: number): Float32Array {
  const rng = new Rng(seed);
  const x = new Float32Array(n);
  const bounds = boundaries(fmt);
  const qmax = QMAX[fmt];
  for (let g0 = 0, k = 0; g0 < n; g0 += G, k++) {
    const len = Math.min(G, n - g0);
    const at = (j: number, v: number) => {
      if (j < len) x[g0 + j] = v;
    };
    switch (k % 8) {
      case 0:
        for (let j = 0; j < len; j++) at(j, rng.normal() * 0.7 * (j % 13 === 5 ? 40 : 1));
        break;
      case 1:
        break; // all zeros
      case 2:
        for (let j = 0; j < len; j++) at(j, rng.normal() * 1e-36);
        break;
      case 3:
        for (let j = 0; j < len; j++) at(j, f32((rng.next() - 0.5) * 6e38));
        break;
      case 4:
        for (let j = 0; j < len; j++) at(j, rng.normal() * 1e-30);
        break;
      case 5: {
        // s = 2^-3 exactly: amax = qmax / 8, every other x/s a boundary (ties) or one ulp beside it.
        at(0, qmax / 8);
        for (let j = 1; j < len; j++) {
          const b = bounds[rng.int(bounds.length)];
          at(j, fromBits(bitsOf(b / 8) + [0, 1, -1][j % 3]));
        }
        break;
      }
      case 6: {
        // arbitrary s: x = RN(b·s) ± a few ulps, so x/s is within a few ulps of b.
        const amax = f32(3.7 * (1 + rng.next()));
        const s = f32(amax / qmax);
        at(0, -amax);
        for (let j = 1; j < len; j++) {
          const b = bounds[rng.int(bounds.length)];
          at(j, fromBits(bitsOf(f32(b * s)) + rng.int(9) - 4));
        }
        break;
      }
      default:
        for (let j = 0; j < len; j++) at(j, rng.normal());
        at(1, NaN);
        at(2, Infinity);
        at(3, -Infinity);
        at(4, -0);
        at(5, -1e-20); // rounds to zero: FP8 keeps the sign
    }
  }
  return x;
}

function countDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let d = 0;
  for (let i = 0; i < b.length; i++) if (!Object.is(a[i], b[i])) d++;
  return d;
}

/**
 * Quantizes x on the GPU with `opts`, dequantizes the result, and returns how the words, scales and
 * values differ from the reference (an empty list when identical), plus the paths taken.
 */
async function roundTrip(x: Float32Array, format: QuantFormat, granularity: Granularity,
  opts: QuantizeOptions & QuantizePathOptions & { invSkewUlps?: number } = {}, dqOpts: QuantizePathOptions = {}) {
  const n = x.length;
  const spec: QuantizeSpec = { format, granularity, n };
  const xb = rt.upload('workspace', 'fused.x', n ? x : new Float32Array(1));
  const q = buildQuantize(rt, spec, xb, opts);
  const d = buildDequantize(rt, spec, q.words, q.scales, dqOpts);
  try {
    rt.run([...q.dispatches, ...d.dispatches]);
    const words = await rt.readU32(q.words, 0, q.numWords);
    const scales = await rt.readF32(q.scales, 0, q.numScales);
    const y = await rt.readF32(d.out, 0, n);
    const want = quantizeRef(x, format, granularity, opts);
    const bad: string[] = [];
    const tag = `${format} ${JSON.stringify(granularity)} n=${n}`;
    const ds = countDiff(scales, want.scales);
    const dw = countDiff(words, want.words);
    if (ds || dw) {
      const i = Array.from(want.words).findIndex((w, j) => w !== words[j]);
      bad.push(`${tag}: ${ds} scales, ${dw} words differ (first word ${i}: gpu ${words[i]?.toString(16)} ref ${want.words[i]?.toString(16)})`);
    }
    const dy = countDiff(y, dequantizeRef(want));
    if (dy) bad.push(`${tag}: ${dy} dequantized values differ`);
    if (y.some((v) => Number.isNaN(v))) bad.push(`${tag}: NaN in the dequantized output`);
    return { bad, quantPath: q.path, dequantPath: d.path, dispatches: q.dispatches.length };
  } finally {
    q.destroy();
    d.destroy();
    rt.mem.free(xb);
  }
}

const GROUPS = [32, 64, 128, 256];

describe('fused group quantizer: codes, scales and values equal the reference', () => {
  it.each(QUANT_FORMATS)('%s: groups 32..256, tails, every kind of trouble, with and without subgroups', async (format) => {
    const bad: string[] = [];
    for (const subgroups of [true, false]) {
      for (const G of GROUPS) {
        // 11 groups and a tail of 37 (cuts a group, a code word and a vec4), then 9 groups exactly.
        for (const n of [11 * G + 37, 9 * G]) {
          const r = await roundTrip(troubleData(n, G, format, G + n), format, { kind: 'group', size: G }, { subgroups });
          expect(r.quantPath, `G=${G}`).toBe('fused');
          expect(r.dequantPath).toBe('fused');
          expect(r.dispatches).toBe(1);
          bad.push(...r.bad.map((b) => `${subgroups ? 'subgroups' : 'workgroup memory'}: ${b}`));
        }
      }
    }
    expect(bad).toEqual([]);
  });

  it('the subgroups option picks a different kernel where the device has subgroups (so both were tested above)', () => {
    const spec: QuantizeSpec = { format: 'int8', granularity: { kind: 'group', size: 128 }, n: 1024 };
    const xb = rt.createBuffer('workspace', 'sg.x', 1024 * 4);
    const [a, b] = [true, false].map((subgroups) => buildQuantize(rt, spec, xb, { subgroups }));
    try {
      console.log(`device subgroups: ${rt.gpu.features.subgroups}`);
      expect(a.dispatches[0].pipeline !== b.dispatches[0].pipeline).toBe(rt.gpu.features.subgroups);
    } finally {
      a.destroy();
      b.destroy();
      rt.mem.free(xb);
    }
  });

  it('rows (segments that leave registers empty) and a small tensor, both fused', async () => {
    const bad: string[] = [];
    const cases: [QuantFormat, Granularity, number][] = [
      ['int8', { kind: 'row', rowLength: 40 }, 40 * 13],
      ['fp8-e4m3', { kind: 'row', rowLength: 1000 }, 1000 * 3],
      ['int4', { kind: 'row', rowLength: 200 }, 200 * 7],
      ['fp8-e5m2', { kind: 'tensor' }, 1500],
      ['int8', { kind: 'group', size: 12 }, 12 * 50 + 5],
      ['int8', { kind: 'row', rowLength: 6000 }, 6000 * 2], // 12 registers, a 128-invocation team
    ];
    for (const [format, g, n] of cases) {
      const r = await roundTrip(troubleData(n, g.kind === 'row' ? g.rowLength : g.kind === 'group' ? g.size : 64, format, n), format, g);
      expect(r.quantPath, JSON.stringify(g)).toBe('fused');
      bad.push(...r.bad);
    }
    expect(bad).toEqual([]);
  });

  it('stochastic rounding: the same draws as the reference', async () => {
    const bad: string[] = [];
    for (const format of QUANT_FORMATS) {
      for (const G of [32, 256]) {
        const r = await roundTrip(troubleData(5 * G + 9, G, format, 3), format, { kind: 'group', size: G }, { rounding: 'stochastic', seed: 41 });
        expect(r.quantPath).toBe('fused');
        bad.push(...r.bad);
      }
    }
    expect(bad).toEqual([]);
  });

  it('a reciprocal 4 ulps off (a GPU division at its WGSL error bound) changes no code', async () => {
    const bad: string[] = [];
    for (const format of QUANT_FORMATS) {
      for (const skew of [-4, 4]) {
        const G = 64;
        const r = await roundTrip(troubleData(16 * G, G, format, 9), format, { kind: 'group', size: G }, { invSkewUlps: skew });
        bad.push(...r.bad.map((b) => `skew ${skew}: ${b}`));
      }
    }
    expect(bad).toEqual([]);
  });

  it('the tile loop (fewer workgroups than tiles) and other register counts', async () => {
    const bad: string[] = [];
    const G = 128;
    const n = 40 * G + 20;
    for (const format of ['int4', 'fp8-e4m3'] as const) {
      const x = troubleData(n, G, format, 5);
      for (const opts of [{ maxWorkgroups: 2 }, { regs: 1 }, { regs: 16 }, { regs: 3, maxWorkgroups: 1 }]) {
        const r = await roundTrip(x, format, { kind: 'group', size: G }, opts, opts);
        bad.push(...r.bad.map((b) => `${JSON.stringify(opts)}: ${b}`));
      }
    }
    expect(bad).toEqual([]);
  });

  it('the passes path is still selectable and agrees; n = 0 runs', async () => {
    const x = troubleData(700, 64, 'int8', 2);
    const r = await roundTrip(x, 'int8', { kind: 'group', size: 64 }, { path: 'passes' }, { path: 'passes' });
    expect([r.quantPath, r.dequantPath, r.dispatches]).toEqual(['passes', 'passes', 4]);
    expect(r.bad).toEqual([]);
    const empty = await roundTrip(new Float32Array(0), 'int4', { kind: 'group', size: 32 });
    expect(empty.bad).toEqual([]);
  });

  it('dequantizes to f16 (packed halves and the f32 twin) as the reference rounds code × scale, overflow to Inf included', async () => {
    const bad: string[] = [];
    for (const format of QUANT_FORMATS) {
      for (const G of [32, 64]) {
        const n = 9 * G;
        const x = troubleData(n, G, format, 5 * G);
        const spec: QuantizeSpec = { format, granularity: { kind: 'group', size: G }, n };
        const want = quantizeRef(x, format, spec.granularity);
        const ref = dequantizeF16Ref(want);
        const words = rt.upload('workspace', 'f16dq.w', want.words);
        const scales = rt.upload('workspace', 'f16dq.s', want.scales);
        const packed = buildDequantize(rt, spec, words, scales, { f16: 'packed' });
        const twin = buildDequantize(rt, spec, words, scales, { f16: 'twin' });
        rt.run([...packed.dispatches, ...twin.dispatches]);
        const halves = new Uint16Array((await rt.readU32(packed.out, 0, n / 2)).buffer);
        const tag = `${format} G=${G}`;
        // Bits compared, NaN as any NaN (the reference's NaN pattern is its own).
        const dp = Array.from(ref).filter((v, i) => (Number.isNaN(v) ? !Number.isNaN(f16BitsToF32(halves[i])) : f32ToF16Bits(v) !== halves[i])).length;
        const dt = countDiff(await rt.readF32(twin.out, 0, n), ref);
        if (dp || dt) bad.push(`${tag}: ${dp} packed, ${dt} twin values differ`);
        expect(packed.out.size, tag).toBe(2 * n);
        for (const b of [words, scales]) rt.mem.free(b);
        packed.destroy();
        twin.destroy();
      }
    }
    expect(bad).toEqual([]);
    // Sanity: some value overflowed to Inf and some rounded (the cases the packing must get right).
    const big = dequantizeF16Ref(quantizeRef(troubleData(256, 32, 'int8', 1), 'int8', { kind: 'group', size: 32 }));
    expect(big.some((v) => v === Infinity || v === -Infinity)).toBe(true);
  });
});

describe('fused path selection', () => {
  it('picks the fused kernels for groups and fitting rows, the passes elsewhere', () => {
    const spec = (format: QuantFormat, granularity: Granularity, n = 4096): QuantizeSpec => ({ format, granularity, n });
    expect(fusedQuantizeLayout(spec('int8', { kind: 'group', size: 128 }))).toEqual({ seg: 128, team: 4, regs: 8 });
    expect(fusedQuantizeLayout(spec('int4', { kind: 'group', size: 32 }))).toEqual({ seg: 32, team: 4, regs: 2 });
    expect(fusedQuantizeLayout(spec('fp8-e4m3', { kind: 'row', rowLength: 768 }, 768 * 4))).toEqual({ seg: 768, team: 32, regs: 6 });
    expect(fusedQuantizeLayout(spec('int8', { kind: 'row', rowLength: 8192 }, 8192))).toEqual({ seg: 8192, team: 128, regs: 16 });
    expect(fusedQuantizeLayout(spec('int8', { kind: 'row', rowLength: 8196 }, 8196))).toBeNull();
    expect(fusedQuantizeLayout(spec('int8', { kind: 'group', size: 128 }), 1)).toEqual({ seg: 128, team: 32, regs: 1 });
    expect(fusedQuantizeLayout(spec('int8', { kind: 'group', size: 7 }))).toBeNull();
    expect(fusedQuantizeLayout(spec('int4', { kind: 'group', size: 12 }))).toBeNull(); // a word would straddle two groups
    expect(fusedQuantizeLayout(spec('int8', { kind: 'column', rowLength: 64 }))).toBeNull();
    expect(fusedQuantizeLayout(spec('int8', { kind: 'tensor' }, 1 << 20))).toBeNull(); // too long for a workgroup
    expect(fusedDequantizeSegment(spec('int8', { kind: 'tensor' }, 1 << 20))).toBe(1 << 20);
    expect(fusedDequantizeSegment(spec('int8', { kind: 'group', size: 7 }))).toBeNull();
    expect(() => fusedQuantizeLayout(spec('int8', { kind: 'group', size: 128 }), 0)).toThrow(/regs/);
  });

  it('refuses a fused build where it does not apply, and unknown paths', () => {
    const xb = rt.createBuffer('workspace', 'sel.x', 64 * 4);
    try {
      expect(() => buildQuantize(rt, { format: 'int8', granularity: { kind: 'column', rowLength: 8 }, n: 64 }, xb, { path: 'fused' })).toThrow(/no one-dispatch kernel/);
      expect(() => buildQuantize(rt, { format: 'int8', granularity: { kind: 'group', size: 8 }, n: 64 }, xb, { path: 'fast' as never })).toThrow(/unknown path/);
      expect(() => buildQuantize(rt, { format: 'int8', granularity: { kind: 'group', size: 8 }, n: 64 }, xb, { maxWorkgroups: 0 })).toThrow(/maxWorkgroups/);
    } finally {
      rt.mem.free(xb);
    }
  });
});
