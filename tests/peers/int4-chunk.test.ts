/** The INT4 wire codec of the two-shot all-reduce (DiLoCo's pseudo-gradients) and its all-reduce over loopback. */
import { describe, expect, it } from 'vitest';
import { allReduceMean, allReduceWireBytes, echoWireBytes } from '../../src/peers/collectives/allreduce';
import { decodeInt4Chunk, encodeInt4Chunk } from '../../src/peers/collectives/int4-chunk';
import { CollectiveError } from '../../src/peers/collectives/group';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { codeBytes } from '../../src/engine/quant/pack';
import { int4PayloadBytes } from '../../src/engine/scheme/wire';
import { Rng } from '../../src/engine/util/rng';
import { makeGroups } from './helpers';

const rand = (n: number, seed: number) => {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => rng.normal() * 0.01);
};

describe('INT4 chunk codec', () => {
  it('writes quantizeRef(int4, group 256) codes and scales, nibbles in pack.ts order; decodes to dequantizeRef', () => {
    for (const n of [1, 7, 256, 257, 1000]) {
      const x = rand(n, n);
      x[0] = 0.5; // ties and saturation
      if (n > 3) [x[1], x[2], x[3]] = [0.5 / 7 * 2.5, -(0.5 / 7) * 3.5, NaN];
      const bytes = encodeInt4Chunk(x);
      expect(bytes.length).toBe(int4PayloadBytes(n));
      const q = quantizeRef(x, 'int4', { kind: 'group', size: 256 });
      const nb = q.scales.length;
      const dv = new DataView(bytes.buffer);
      for (let k = 0; k < nb; k++) expect(dv.getFloat32(4 * k, true)).toBe(q.scales[k]);
      expect(Buffer.from(bytes.subarray(4 * nb)).equals(Buffer.from(codeBytes(q.words, n, 4)))).toBe(true);
      const back = decodeInt4Chunk(bytes, n);
      expect(Buffer.from(back.buffer).equals(Buffer.from(dequantizeRef(q).buffer))).toBe(true);
      // Re-encoding decoded values gives the same bytes (what the GPU's codes go through on the wire).
      expect(Buffer.from(encodeInt4Chunk(back)).equals(Buffer.from(bytes))).toBe(true);
    }
  });

  it('refuses a wrong length or a scale that would decode to infinity', () => {
    const b = encodeInt4Chunk(rand(300, 1));
    expect(() => decodeInt4Chunk(b.subarray(1), 300)).toThrow(CollectiveError);
    const bad = b.slice();
    new DataView(bad.buffer).setFloat32(4, 3e38, true);
    expect(() => decodeInt4Chunk(bad, 300, 256, 'p9')).toThrow(/p9: bad scale/);
    new DataView(bad.buffer).setFloat32(4, NaN, true);
    expect(() => decodeInt4Chunk(bad, 300)).toThrow(/bad scale/);
  });
});

describe('allReduceMean with INT4 over loopback', () => {
  it.each([[2, 1000], [3, 4097], [4, 63]])('%i peers, n=%i: bit-identical everywhere, within the two-quantization bound, bytes as the formula', async (N, n) => {
    const gs = Array.from({ length: N }, (_, r) => rand(n, 100 + r));
    const { groups, rejects } = makeGroups(N, { chunkPayload: 1000 });
    const q = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int4' })));
    expect(rejects.flat()).toEqual([]);
    for (let r = 1; r < N; r++) expect(Buffer.from(q[r].out.buffer).equals(Buffer.from(q[0].out.buffer))).toBe(true);
    for (let r = 0; r < N; r++) expect(q[r].bytesSent).toBe(allReduceWireBytes(n, N, r, 'int4', { chunkPayload: 1000 }));
    // |out − mean| ≤ mean_r(s_r)/2 + s_out/2 per block, s = amax/7; checked loosely with the block absmax.
    for (let k = 0; k < Math.ceil(n / 256); k++) {
      const a0 = k * 256;
      const a1 = Math.min(n, a0 + 256);
      let amax = 0;
      for (const g of gs) for (let i = a0; i < a1; i++) amax = Math.max(amax, Math.abs(g[i]));
      for (let i = a0; i < a1; i++) {
        const mean = gs.reduce((a, g) => a + g[i], 0) / N;
        expect(Math.abs(q[0].out[i] - mean)).toBeLessThanOrEqual(amax / 7 + 1e-12);
      }
    }
    // The contribution's bytes (the signed headers and echo, the same in every format, aside).
    const fixed = echoWireBytes(N, 1000);
    const fp32 = allReduceWireBytes(n, N, 0, 'fp32', { chunkPayload: 1000 });
    if (n >= 1000) expect((q[0].bytesSent - fixed) / (fp32 - fixed)).toBeLessThan(0.2); // frame headers dominate tiny chunks
  });
});
