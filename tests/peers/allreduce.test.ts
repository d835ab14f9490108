import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  AGOQ_BLOCK,
  allReduceMean,
  allReduceWireBytes,
  chunkBounds,
  decodeInt8Chunk,
  encodeInt8Chunk,
  echoWireBytes,
  int8PayloadBytes,
} from '../../src/peers/collectives/allreduce';
import { CollectiveError } from '../../src/peers/collectives/group';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { limitTransport } from '../../src/peers/transport/limiter';
import { webcrypto } from 'node:crypto';
import { makeGroups, misbehave } from './helpers';

/** Per-rank gradients with very different block magnitudes (outliers, a zero block, tiny values). */
function grads(ranks: number, n: number, seed: number): Float32Array[] {
  return Array.from({ length: ranks }, (_, r) => {
    const rng = new Rng(seed * 31 + r);
    const g = rng.normalArray(n, 10 ** (rng.int(5) - 3));
    if (n > 3) g[rng.int(n)] = 50 * (r + 1);
    for (let i = 256; i < Math.min(n, 512); i++) g[i] = 0; // a zero block on every rank
    return g;
  });
}

/**
 * Bound of the verified INT8 reduction, per element of block b, vs the exact mean m (fp64): each
 * rank's element is quantized once, error ≤ s_{i,b}/2 with s_{i,b} = absmax(g_i block)/127, so the
 * mean of the dequantized values is off by ≤ mean_i(s_{i,b})/2; plus fp32 rounding (decode·scale,
 * N fp32 additions, the division): a few ulps of the block absmax.
 */
function bound(gs: Float32Array[], n: number): Float64Array {
  const out = new Float64Array(n);
  const N = gs.length;
  for (let b0 = 0; b0 < n; b0 += AGOQ_BLOCK) {
    const b1 = Math.min(n, b0 + AGOQ_BLOCK);
    let e1 = 0;
    let amaxAll = 0;
    for (const g of gs) {
      let a = 0;
      for (let i = b0; i < b1; i++) a = Math.max(a, Math.abs(g[i]));
      e1 += a / 127 / 2 / N;
      amaxAll = Math.max(amaxAll, a);
    }
    const slop = (N + 4) * 2 ** -23 * amaxAll;
    for (let i = b0; i < b1; i++) out[i] = e1 + slop;
  }
  return out;
}

function exactMean(gs: Float32Array[], n: number): Float64Array {
  const m = new Float64Array(n);
  for (const g of gs) for (let i = 0; i < n; i++) m[i] += g[i];
  for (let i = 0; i < n; i++) m[i] /= gs.length;
  return m;
}

/** The verified INT8 reduction computed serially with the shared codec: Q per rank, fp32 sum in rank order, /N. */
function int8Serial(gs: Float32Array[], n: number): Float32Array {
  const gran = { kind: 'group', size: AGOQ_BLOCK } as const;
  const acc = new Float32Array(n);
  for (const g of gs) {
    const d = dequantizeRef(quantizeRef(g, 'int8', gran));
    for (let i = 0; i < n; i++) acc[i] = Math.fround(acc[i] + d[i]);
  }
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.fround(acc[i] / gs.length);
  return out;
}

describe('chunking and the INT8 chunk codec', () => {
  it('chunks are block-aligned and cover [0, n)', () => {
    for (const [n, N] of [[0, 3], [1, 2], [255, 8], [257, 2], [5000, 3], [65536, 8]]) {
      const b = chunkBounds(n, N);
      expect(b.length).toBe(N);
      expect(b[0][0]).toBe(0);
      expect(b[N - 1][1]).toBe(n);
      for (let r = 1; r < N; r++) expect(b[r][0]).toBe(b[r - 1][1]);
      for (const [a] of b) expect(a % AGOQ_BLOCK === 0 || a === n).toBe(true);
    }
  });

  it('encode/decode = quantizeRef/dequantizeRef; bad lengths and scales are rejected', () => {
    const x = new Rng(2).normalArray(700);
    const bytes = encodeInt8Chunk(x);
    expect(bytes.length).toBe(int8PayloadBytes(700)); // 700 + 4·3
    const y = decodeInt8Chunk(bytes, 700);
    const q = quantizeRef(x, 'int8', { kind: 'group', size: AGOQ_BLOCK });
    expect(y).toEqual(dequantizeRef(q));
    for (let i = 0; i < 700; i++) expect(Math.abs(y[i] - x[i])).toBeLessThanOrEqual(q.scales[i >> 8] * 0.5 * (1 + 1e-6));
    expect(() => decodeInt8Chunk(bytes.subarray(1), 700)).toThrow(CollectiveError);
    expect(() => decodeInt8Chunk(bytes, 701)).toThrow(/expected/);
    for (const s of [NaN, Infinity, -1, 3e38]) {
      const bad = bytes.slice();
      new DataView(bad.buffer).setFloat32(4, s, true);
      expect(() => decodeInt8Chunk(bad, 700)).toThrow(/bad scale/);
    }
  });

  it('the specialised int8 codec gives quantizeRef\'s exact codes and scales: ties, specials, tiny and huge blocks', () => {
    const rng = new Rng(9);
    const n = 256 * 12 + 77;
    const x = rng.normalArray(n);
    // Ties of x/s at ±k.5 (s = 1 when the block's absmax is 127), NaN/Inf, a zero block, a tiny block, a huge one.
    const tie = [127, 2.5, -2.5, 3.5, -3.5, 0.5, -0.5, 126.5, -126.5, 1.5];
    x.set(tie, 0);
    x.set([NaN, Infinity, -Infinity, 1], 256);
    x.fill(0, 512, 768);
    for (let i = 768; i < 1024; i++) x[i] *= 1e-33;
    for (let i = 1024; i < 1280; i++) x[i] *= 1e37;
    const bytes = encodeInt8Chunk(x);
    const q = quantizeRef(x, 'int8', { kind: 'group', size: AGOQ_BLOCK });
    const nb = Math.ceil(n / AGOQ_BLOCK);
    const dv = new DataView(bytes.buffer);
    for (let k = 0; k < nb; k++) expect(dv.getFloat32(4 * k, true), `scale ${k}`).toBe(q.scales[k]);
    const codes = new Uint8Array(q.words.buffer, 0, n);
    expect(Buffer.from(bytes.subarray(4 * nb)).equals(Buffer.from(codes))).toBe(true);
    expect(Array.from(new Int8Array(bytes.buffer, 4 * nb, tie.length))).toEqual([127, 2, -2, 4, -4, 0, 0, 126, -126, 2]);
  });
});

describe('allReduceMean over loopback', () => {
  const cases: [number, number][] = [[2, 1], [2, 257], [3, 1000], [4, 5000], [5, 63], [8, 4097], [8, 7]];

  it.each(cases)('%i peers, n=%i: int8 within the one-quantization bound, bit-identical everywhere', async (N, n) => {
    const gs = grads(N, n, N * 1000 + n);
    const mean = exactMean(gs, n);
    const tol = bound(gs, n);

    const { groups, rejects } = makeGroups(N, { chunkPayload: 1000 });
    const q = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8' })));
    const f = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32' })));
    expect(rejects.flat()).toEqual([]);
    for (let r = 1; r < N; r++) {
      expect(Buffer.from(q[r].out.buffer).equals(Buffer.from(q[0].out.buffer))).toBe(true);
      expect(Buffer.from(f[r].out.buffer).equals(Buffer.from(f[0].out.buffer))).toBe(true);
    }
    expect(Buffer.from(q[0].out.buffer).equals(Buffer.from(int8Serial(gs, n).buffer))).toBe(true);
    let worst = 0;
    for (let i = 0; i < n; i++) {
      expect(f[0].out[i]).toBe(Math.fround(mean[i])); // fp32 path: the fp64 mean, rounded once
      const err = Math.abs(q[0].out[i] - mean[i]);
      if (!(err <= tol[i])) throw new Error(`element ${i}: |${q[0].out[i]} − ${mean[i]}| = ${err} > bound ${tol[i]}`);
      if (tol[i] > 0) worst = Math.max(worst, err / tol[i]);
      if (i >= 256 && i < 512) expect(q[0].out[i]).toBe(0); // a zero block stays exactly zero
    }
    expect(worst).toBeGreaterThan(0); // the comparison is not vacuous
  });

  it('INT8 moves ≈ 1/4 of the fp32 bytes (+ 4 B scale per 256 elements)', async () => {
    const N = 4;
    const n = 1 << 16;
    const gs = grads(N, n, 1);
    const { groups } = makeGroups(N);
    const q = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8' })));
    const f = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32' })));
    // Each rank sends N−1 copies of its signed commitment (one slot), its N-slot commitment row, its whole contribution and its N-slot echo.
    const echo = (N - 1) * (128 + 44 + 2 * (N * 128 + 44));
    const payloadInt8 = (N - 1) * int8PayloadBytes(n) + echo;
    const payloadF32 = (N - 1) * 4 * n + echo;
    for (let r = 0; r < N; r++) {
      expect(q[r].bytesSent).toBe(allReduceWireBytes(n, N, r, 'int8'));
      expect(f[r].bytesSent).toBe(allReduceWireBytes(n, N, r, 'fp32'));
      expect(q[r].bytesSent).toBeGreaterThanOrEqual(payloadInt8);
      expect(q[r].bytesSent).toBeLessThan(payloadInt8 * 1.01); // headers: 44 B per 16 KiB frame
      expect(f[r].bytesSent).toBeGreaterThanOrEqual(payloadF32);
      expect(f[r].bytesSent).toBeLessThan(payloadF32 * 1.01);
      expect(q[r].bytesReceived).toBe(q[r].bytesSent); // symmetric
    }
    const fixed = echoWireBytes(N); // the commitments, commitment rows and the echo: the same in both formats
    const ratio = (q[0].bytesSent - fixed) / (f[0].bytesSent - fixed);
    expect(ratio).toBeGreaterThan(0.25 * (1 + 4 / 256) - 0.002);
    expect(ratio).toBeLessThan(0.25 * (1 + 4 / 256) + 0.002);
  });

  it('uneven lengths, reordered multi-frame delivery: exact byte counts, identical results', async () => {
    const N = 3;
    const n = 2 * 256 * N + 17; // a short last block
    const gs = grads(N, n, 77);
    const { groups } = makeGroups(N, { chunkPayload: 300 }, { reorder: { seed: 9 } });
    const q = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8' })));
    for (let r = 0; r < N; r++) {
      expect(q[r].bytesSent).toBe(allReduceWireBytes(n, N, r, 'int8', { chunkPayload: 300 }));
      expect(Buffer.from(q[r].out.buffer).equals(Buffer.from(q[0].out.buffer))).toBe(true);
    }
  });

  describe('over rate-limited links (fake timers)', () => {
    afterEach(() => {
      vi.useRealTimers();
      vi.unstubAllGlobals();
    });

    it('INT8 finishes in about a quarter of fp32\'s time at 1 MB/s', async () => {
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
      // The synchronous SHA-256: WebCrypto's runs on a real thread while the fake clock advances.
      vi.stubGlobal('crypto', { getRandomValues: <T extends ArrayBufferView>(a: T) => webcrypto.getRandomValues(a as unknown as Uint8Array<ArrayBuffer>) as unknown as T });
      const N = 3;
      const n = 3 * 16384;
      const gs = grads(N, n, 5);
      const time = async (mode: 'int8' | 'fp32') => {
        const { groups } = makeGroups(N, { timeoutMs: 60_000 }, {}, (t) => limitTransport(t, { bytesPerSecond: 1e6, latencyMs: 20 }));
        const t0 = Date.now();
        let t1 = 0;
        const all = Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode }))).then((x) => ((t1 = Date.now()), x));
        while (t1 === 0) await vi.advanceTimersByTimeAsync(5);
        await all;
        return t1 - t0;
      };
      const tq = await time('int8');
      const tf = await time('fp32');
      // fp32: (N−1)·4n bytes per rank ≈ 393 kB → ≈ 393 ms + latencies; int8 ≈ 100 ms + latencies.
      expect(tf).toBeGreaterThan(250);
      expect(tq).toBeLessThan(tf / 2.5);
    });
  });

  it('a NaN contribution is left out and a malformed one (NaN scale, wrong length) faulted, alike on every member', async () => {
    const N = 3;
    const n = 600;
    const gs = grads(N, n, 4);
    const cases: ['fp32' | 'int8', Uint8Array, RegExp, boolean][] = [
      ['fp32', new Uint8Array(4 * n).fill(0xff), /non-finite/, false], // 0xffffffff is a NaN
      ['int8', (() => { const p = encodeInt8Chunk(gs[2]); new DataView(p.buffer).setFloat32(4, NaN, true); return p; })(), /bad scale/, true],
      ['int8', new Uint8Array(5), /malformed/, true],
    ];
    for (const [mode, bad, why, fault] of cases) {
      const { groups } = makeGroups(N, { timeoutMs: 2000 });
      const evil = groups[2];
      const honest = groups.slice(0, 2).map((g, r) => allReduceMean(g, gs[r], { mode }));
      // The faulty rank sends the same bad contribution, signed, to both and an honest echo of what it saw.
      await misbehave(evil, bad);
      const res = await Promise.all(honest);
      const want = (await Promise.all(makeGroups(2).groups.map((g, r) => allReduceMean(g, gs[r], { mode })))).map((x) => x.out);
      for (const x of res) {
        expect(x.excluded).toHaveLength(1);
        expect(x.excluded[0]).toMatchObject({ peer: 'p2', rank: 2, fault });
        expect(x.excluded[0].why).toMatch(why);
        expect(Buffer.from(x.out.buffer).equals(Buffer.from(want[0].buffer))).toBe(true);
      }
    }
    await expect(allReduceMean(makeGroups(2).groups[0], Float32Array.of(1, NaN), { mode: 'fp32' })).rejects.toThrow(/non-finite/);
  });
});
