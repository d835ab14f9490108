/**
 * The GPU gradient exchange (src/parallel/exchange/grad-exchange.ts) against the JS all-reduce's wire
 * and arithmetic (src/peers/collectives/allreduce.ts, dp-grads.ts), bit for bit, on SwiftShader.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chunkBounds, decodeInt8Chunk, encodeInt8Chunk } from '../../src/peers/collectives/allreduce';
import { gradientAccess } from '../../src/parallel/dp/grads';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { exchangeMeanRef, gramRef, sumSquaresRef, wireScales } from '../../src/engine/kernels/exchange/exchange.ref';
import { quantizeRef } from '../../src/engine/quant/quantizer';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { fp32Dot, int8Dot, int8Norm2, MAX_WIRE_SCALE, storedLayout, wireChunk } from '../../src/parallel/exchange/wire';
import { ContributionError, GradExchange } from '../../src/parallel/exchange/grad-exchange';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { Trainer } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { syntheticText } from '../../src/lab/step';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();
let rt: Runtime;
beforeAll(async () => {
  rt = await testRuntime();
});

/** A vector with blocks of very different magnitudes, an all-zero block, and odd values. */
function vector(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  const x = rng.normalArray(n, 1);
  for (let i = 0; i < n; i++) x[i] *= 2 ** (((i >> 8) % 7) * 3 - 12);
  x.fill(0, 256, Math.min(n, 512));
  return x;
}

const f32Bytes = (x: Float32Array) => new Uint8Array(x.slice().buffer);
/** allreduce.ts's shot-1 reduction: decode, fp32 sum in member order, divide by the count. */
function jsMeanInt8(bytes: Uint8Array[], n: number): Float32Array {
  const acc = new Float32Array(n);
  for (const b of bytes) {
    const v = decodeInt8Chunk(b, n);
    for (let i = 0; i < n; i++) acc[i] += v[i];
  }
  for (let i = 0; i < n; i++) acc[i] = acc[i] / bytes.length;
  return acc;
}
const read = (b: GPUBuffer, n: number) => rt.readF32(b, 0, n);

describe('GradExchange over an fp32 buffer', () => {
  const n = 1234 + 2 * 256; // not a multiple of 4 or of 256
  it('encodes exactly encodeInt8Chunk / the fp32 bytes of the buffer', async () => {
    const x = vector(n, 1);
    x[7] = NaN;
    x[300] = Infinity;
    for (const wire of ['int8', 'fp32'] as const) {
      const ex = GradExchange.forBuffer(rt, wire, up(rt, x), n);
      const got = await ex.encode();
      expect(got.length).toBe(ex.bytes);
      expect(Buffer.from(got).equals(Buffer.from(wire === 'int8' ? encodeInt8Chunk(x) : f32Bytes(x)))).toBe(true);
      ex.destroy();
    }
  });

  it('reduces INT8 contributions to the JS all-reduce mean bit for bit, leaving out nulls', async () => {
    const cs = [1, 2, 3].map((s) => encodeInt8Chunk(vector(n, 10 + s)));
    const buf = up(rt, new Float32Array(n));
    const ex = GradExchange.forBuffer(rt, 'int8', buf, n);
    await ex.reduce(cs);
    const want = jsMeanInt8(cs, n);
    expect(exchangeMeanRef(cs, n, 'int8')).toEqual(want);
    expect(await read(buf, n)).toEqual(want);
    await ex.reduce([cs[0], null, cs[2]]);
    expect(await read(buf, n)).toEqual(jsMeanInt8([cs[0], cs[2]], n));
    ex.destroy();
  });

  it('reduces fp32 contributions with fp32 accumulation in member order into a separate output', async () => {
    const xs = [1, 2, 3].map((s) => vector(n, 20 + s));
    const src = up(rt, xs[0]);
    const out = up(rt, new Float32Array(n));
    const ex = GradExchange.forBuffer(rt, 'fp32', src, n, out);
    await ex.reduce(xs.map(f32Bytes));
    const want = new Float32Array(n);
    for (const x of xs) for (let i = 0; i < n; i++) want[i] += x[i];
    for (let i = 0; i < n; i++) want[i] /= 3;
    expect(await read(out, n)).toEqual(want);
    expect(await read(src, n)).toEqual(xs[0]);
    ex.destroy();
  });

  it('rejects malformed contributions naming the member, writing nothing', async () => {
    const good = encodeInt8Chunk(vector(n, 5));
    const before = vector(n, 6);
    const buf = up(rt, before);
    const ex = GradExchange.forBuffer(rt, 'int8', buf, n);
    const withScale = (s: number) => {
      const b = good.slice();
      new DataView(b.buffer).setFloat32(4, s, true);
      return b;
    };
    const cases: [Uint8Array, RegExp][] = [
      [good.subarray(1), /member 1: .*expected/],
      [withScale(NaN), /member 1: bad scale NaN in block 1/],
      [withScale(-1), /member 1: bad scale -1 in block 1/],
      [withScale(MAX_WIRE_SCALE * 2), /member 1: bad scale/],
    ];
    for (const [bad, msg] of cases) {
      const err = await ex.reduce([good, bad, good]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ContributionError);
      expect((err as ContributionError).member).toBe(1);
      expect((err as Error).message).toMatch(msg);
    }
    await expect(ex.reduce([null, null])).rejects.toThrow(/no contribution/);
    expect(await read(buf, n)).toEqual(before);
    ex.destroy();

    const ef = GradExchange.forBuffer(rt, 'fp32', buf, n);
    const nan = vector(n, 7);
    nan[99] = NaN;
    const err = await ef.reduce([f32Bytes(before), f32Bytes(before), f32Bytes(nan)]).catch((e: unknown) => e);
    expect((err as ContributionError).member).toBe(2);
    expect(await read(buf, n)).toEqual(before);
    ef.destroy();
  });

  it('reduceChunk returns encodeInt8Chunk of the chunk mean; assign decodes the owners\' chunks', async () => {
    const xs = [1, 2, 3].map((s) => vector(n, 30 + s));
    const ex = GradExchange.forBuffer(rt, 'int8', up(rt, new Float32Array(n)), n);
    const bounds = chunkBounds(n, 3);
    const whole = encodeInt8Chunk(xs[0]);
    for (const [lo, hi] of bounds) expect(wireChunk(whole, n, 'int8', lo, hi)).toEqual(encodeInt8Chunk(xs[0].subarray(lo, hi)));
    const reduced: Uint8Array[] = [];
    for (const [lo, hi] of bounds) {
      const pieces = xs.map((x) => encodeInt8Chunk(x.subarray(lo, hi)));
      const got = await ex.reduceChunk(pieces, lo, hi);
      expect(Buffer.from(got).equals(Buffer.from(encodeInt8Chunk(jsMeanInt8(pieces, hi - lo))))).toBe(true);
      reduced.push(got.slice());
    }
    const out = up(rt, new Float32Array(n));
    const ea = GradExchange.forBuffer(rt, 'int8', out, n);
    await ea.assign(reduced, bounds);
    const want = new Float32Array(n);
    bounds.forEach(([lo, hi], r) => want.set(decodeInt8Chunk(reduced[r], hi - lo), lo));
    expect(await read(out, n)).toEqual(want);
    await expect(ea.reduceChunk([reduced[0]], 100, 356)).rejects.toThrow(/multiple of 256/);
    ex.destroy();
    ea.destroy();
  });

  it('stats: ‖x‖² from integer block sums (identical to the fp64 block formula, within 1e-12 of the element-wise fp64 norm), bad ones flagged', async () => {
    const cs = [1, 2].map((s) => encodeInt8Chunk(vector(n, 40 + s)));
    const bad = cs[0].slice();
    new DataView(bad.buffer).setFloat32(0, Infinity, true);
    const ex = GradExchange.forBuffer(rt, 'int8', up(rt, new Float32Array(n)), n);
    const st = await ex.stats([cs[0], null, bad, cs[1]]);
    expect(st[1]).toBeNull();
    expect(st[2]).toMatchObject({ finite: false });
    expect(st[2]!.problem).toMatch(/bad scale Infinity/);
    for (const [i, c] of [[0, cs[0]], [3, cs[1]]] as const) {
      expect(st[i]!.finite).toBe(true);
      expect(st[i]!.norm2).toBe(int8Norm2(wireScales(c, n), sumSquaresRef(c, n)));
      // Σ (c·s)² in fp64 element by element (c·s is exact in a double).
      const sc = wireScales(c, n);
      const codes = new Int8Array(c.buffer, 4 * sc.length, n);
      let ref = 0;
      for (let k = 0; k < n; k++) ref += (codes[k] * sc[k >> 8]) ** 2;
      expect(Math.abs(st[i]!.norm2 - ref) / ref).toBeLessThan(1e-12);
    }
    // A reduce of the screened list reads the uploaded contributions.
    const buf = up(rt, new Float32Array(n));
    const er = GradExchange.forBuffer(rt, 'int8', buf, n);
    await er.stats(cs);
    await er.reduce(cs);
    expect(await read(buf, n)).toEqual(jsMeanInt8(cs, n));
    ex.destroy();
    er.destroy();
  });
});

describe('GradExchange.gram', () => {
  it('INT8: per-block integer dots of every pair equal gramRef; G = Σ_b s_j s_k I_b (diagonal = stats’ norm); fp32: fp64 dots', async () => {
    const n = 1234 + 3 * 256;
    // Aligned and unaligned arrays, codes of both signs (a sign-flipped copy), a left-out member.
    const xs = [1, 2, 3].map((s) => vector(n, 60 + s));
    const cs = [...xs.map((x) => encodeInt8Chunk(x)), encodeInt8Chunk(xs[0].map((v) => -1000 * v))];
    const odd = new Uint8Array(cs[1].length + 1).subarray(1);
    odd.set(cs[1]);
    const list = [cs[0], null, odd, cs[2], cs[3]];
    const live = [cs[0], odd, cs[2], cs[3]];
    const ex = GradExchange.forBuffer(rt, 'int8', up(rt, new Float32Array(n)), n);
    const st = await ex.stats(list);
    const G = await ex.gram(list);
    const ints = gramRef(live, n);
    const nb = Math.ceil(n / 256);
    expect(ints.some((v) => v < 0)).toBe(true);
    const idx = [0, 2, 3, 4];
    let q = 0;
    for (let a = 0; a < 4; a++) {
      for (let b = a; b < 4; b++, q++) {
        const want = int8Dot(wireScales(live[a], n), wireScales(live[b], n), ints.subarray(q * nb, (q + 1) * nb));
        expect(G[idx[a]]![idx[b]]).toBe(want);
        expect(G[idx[b]]![idx[a]]).toBe(want);
      }
      expect(G[idx[a]]![idx[a]]).toBe(st[idx[a]]!.norm2);
    }
    expect(G[1]).toBeNull();
    // The Gram's ints are the plain dot of the codes (reference checked against a direct sum).
    const c0 = new Int8Array(cs[0].buffer, 4 * nb, n);
    const c3 = new Int8Array(cs[3].buffer, 4 * nb, n);
    let direct = 0;
    for (let i = 0; i < n; i++) direct += c0[i] * c3[i];
    expect(Array.from(gramRef([cs[0], cs[3]], n).subarray(nb, 2 * nb)).reduce((a, v) => a + v, 0)).toBe(direct);
    // The upload stays for a reduce of the same arrays.
    const buf = up(rt, new Float32Array(n));
    const er = GradExchange.forBuffer(rt, 'int8', buf, n);
    await er.gram(cs);
    await er.reduce(cs.slice(0, 3));
    expect(await read(buf, n)).toEqual(jsMeanInt8(cs.slice(0, 3), n));
    const ef = GradExchange.forBuffer(rt, 'fp32', up(rt, new Float32Array(n)), n);
    const fs = xs.map(f32Bytes);
    const F = await ef.gram([fs[0], fs[1], null, fs[2]]);
    expect(F[0]![3]).toBe(fp32Dot(fs[0], fs[2], n));
    expect(F[1]![1]).toBe(fp32Dot(fs[1], fs[1], n));
    expect(F[2]).toBeNull();
    [ex, er, ef].forEach((e) => e.destroy());
  });
});

describe('GradExchange over a training model', () => {
  const text = syntheticText(2, 16);
  const trainers: Trainer[] = [];
  const make = async (scheme: string | ReturnType<typeof parseScheme>) => {
    const o = defaultTrainOptions('micro', { batch: 2, seq: 16, scheme: typeof scheme === 'string' ? SCHEME_PRESETS[scheme] : scheme });
    const t = await Trainer.create(rt, o, text);
    trainers.push(t);
    await t.computeGradients(t.batchAt(0));
    return t;
  };
  afterAll(() => trainers.forEach((t) => t.destroy()));

  it('fp32 gradients: encode equals the wire bytes of the gradient; reduce writes the mean into grads', async () => {
    const t = await make('fp32');
    const g = await t.model.readFlat('grads');
    for (const wire of ['int8', 'fp32'] as const) {
      const ex = GradExchange.forModel(t.model, wire);
      expect(ex.n).toBe(g.length);
      expect(Buffer.from(await ex.encode()).equals(Buffer.from(wire === 'int8' ? encodeInt8Chunk(g) : f32Bytes(g)))).toBe(true);
      ex.destroy();
    }
    const ex = GradExchange.forModel(t.model, 'int8');
    const cs = [encodeInt8Chunk(g), encodeInt8Chunk(vector(g.length, 3).map((v) => v * 1e-3))];
    await ex.reduce(cs);
    expect(await t.model.readFlat('grads')).toEqual(jsMeanInt8(cs, g.length));
    ex.destroy();
  });

  it('AGoQ storage: stored codes go to the wire as they are (= encodeInt8Chunk of the dequantized gradient); reduce re-quantizes the mean into the storage', async () => {
    const t = await make('agoq');
    const access = gradientAccess(t.model);
    const g = await access.read();
    const ex = GradExchange.forModel(t.model, 'int8');
    expect(ex.direct).toBe(true);
    expect(ex.n).toBe(access.length);
    const mine = (await ex.encode()).slice();
    expect(Buffer.from(mine).equals(Buffer.from(encodeInt8Chunk(g)))).toBe(true);
    const ef = GradExchange.forModel(t.model, 'fp32');
    expect(Buffer.from(await ef.encode()).equals(Buffer.from(f32Bytes(g)))).toBe(true);
    ef.destroy();

    const other = encodeInt8Chunk(vector(g.length, 9).map((v) => v * 1e-2));
    // Padding codes a member should not send are ignored (the mean's padding is zeroed).
    const { slots } = storedLayout(t.model)!;
    const last = slots.find((s) => s.st.n % 256 !== 0);
    if (last) other[4 * Math.ceil(g.length / 256) + last.at + last.st.n] = 100;
    await ex.reduce([mine, other]);
    const mean = jsMeanInt8([mine, other], g.length);
    for (const s of slots) {
      const want = quantizeRef(mean.subarray(s.at, s.at + s.st.n), 'int8', { kind: 'group', size: 256 });
      expect(await rt.readU32(s.words, 0, s.st.words)).toEqual(want.words);
      expect(await rt.readF32(s.scales, 0, s.st.scales)).toEqual(want.scales);
    }
    ex.destroy();
  });

  it('storage in another format (INT4 groups of 128) goes through its own dequantize and quantize', async () => {
    const scheme = parseScheme({ name: 'g4s', grads: { storage: { format: 'int4', granularity: 'group', group: 128, rounding: 'nearest' }, wire: { format: 'fp32' } } });
    const t = await make(scheme);
    const access = gradientAccess(t.model);
    const g = await access.read();
    const ex = GradExchange.forModel(t.model, 'int8');
    expect(ex.direct).toBe(false);
    const mine = (await ex.encode()).slice();
    expect(Buffer.from(mine).equals(Buffer.from(encodeInt8Chunk(g)))).toBe(true);
    const other = encodeInt8Chunk(vector(g.length, 11).map((v) => v * 1e-2));
    await ex.reduce([mine, other]);
    const mean = jsMeanInt8([mine, other], g.length);
    for (const s of storedLayout(t.model)!.slots) {
      const want = quantizeRef(mean.subarray(s.at, s.at + s.st.n), 'int4', { kind: 'group', size: 128 });
      expect(await rt.readU32(s.words, 0, s.st.words)).toEqual(want.words);
    }
    ex.destroy();
  });
});

describe('GradExchange streamed behind backward', () => {
  const text = syntheticText(2, 16);
  const trainers: Trainer[] = [];
  afterAll(() => trainers.forEach((t) => t.destroy()));
  const spansOf = (n: number, bucket: number): [number, number][] => {
    const out: [number, number][] = [];
    for (let a = 0; a < n; a += bucket) out.push([a, Math.min(n, a + bucket)]);
    return out;
  };

  it('each bucket encoded right after the backward segment that completes it equals wireChunk of the whole encode (fp32, INT8, AGoQ storage, INT4 storage; tied and untied embeddings); the segmented backward gives the same gradient', async () => {
    const int4 = parseScheme({ name: 'g4s', grads: { storage: { format: 'int4', granularity: 'group', group: 128, rounding: 'nearest' }, wire: { format: 'fp32' } } });
    const cases = [['fp32', 'int8'], ['fp32', 'fp32'], ['agoq', 'int8'], [int4, 'int8'], [int4, 'fp32'], ['fp32-untied', 'int8']] as const;
    for (const [scheme, wire] of cases) {
      const untied = scheme === 'fp32-untied'; // micro ties its embeddings
      const o = defaultTrainOptions('micro', { batch: 2, seq: 16, scheme: typeof scheme === 'string' ? SCHEME_PRESETS[untied ? 'fp32' : scheme] : scheme });
      const t = await Trainer.create(rt, untied ? { ...o, model: { ...o.model, tie_word_embeddings: false } } : o, text);
      trainers.push(t);
      // An untied head's gradient is final before backward starts (its backward runs with its logits' chunks at the forward's end, model/lm-head.ts).
      for (const v of t.model.layout.views) {
        if (v.name === 'lm_head.weight') expect(t.model.gradFinal.get(v.name)).toBe(0);
        else expect(t.model.gradFinal.get(v.name), v.name).toBeGreaterThan(0);
      }
      // A tied embedding is written twice (lm_head.dw, embed.bwd): final only after the last dispatch.
      if (!untied) expect(t.model.gradFinal.get('model.embed_tokens.weight')).toBe(t.model.backward.length);
      const ex = GradExchange.forModel(t.model, wire);
      expect(ex.streamable).toBe(true);
      const spans = spansOf(ex.n, 4096);
      const plan = ex.streamPlan(spans);
      expect(plan.cuts.length).toBeGreaterThan(2);
      expect(plan.bySegment.flat().sort((a, b) => a - b)).toEqual(spans.map((_, b) => b));
      const events: string[] = [];
      const pieces: Promise<Uint8Array>[] = [];
      const loss = await t.computeGradients(t.batchAt(0), {
        cuts: plan.cuts,
        onSegment: (i) => {
          events.push(`segment ${i}`);
          for (const b of plan.bySegment[i]) {
            events.push(`bucket ${b}`);
            pieces[b] = ex.encodeRange(spans[b][0], spans[b][1], b).then((p) => p.slice());
          }
        },
      });
      const got = await Promise.all(pieces);
      // Buckets of the layout's tail are read back while later segments are still to run.
      expect(events.indexOf('bucket 0')).toBeGreaterThan(events.indexOf(`bucket ${spans.length - 1}`));
      expect(events.findIndex((e) => e.startsWith('bucket'))).toBeLessThan(events.indexOf(`segment ${plan.cuts.length - 1}`));
      const grads = await gradientAccess(t.model).read();
      const whole = (await ex.encode()).slice();
      spans.forEach(([lo, hi], b) => expect(Buffer.from(got[b]).equals(Buffer.from(wireChunk(whole, ex.n, wire, lo, hi))), `${String(scheme)} ${wire} bucket ${b}`).toBe(true));
      for (const cuts of [[5, 3], [t.model.backward.length + 1], [0]]) {
        await expect(t.computeGradients(t.batchAt(0), { cuts, onSegment: () => {} })).rejects.toThrow(/ascend within/);
      }
      expect(await t.computeGradients(t.batchAt(0))).toBe(loss);
      expect(await gradientAccess(t.model).read()).toEqual(grads);
      expect(Buffer.from(await ex.encode()).equals(Buffer.from(whole))).toBe(true);
      ex.destroy();
    }
  });
});
