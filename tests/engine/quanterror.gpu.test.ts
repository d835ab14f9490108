/** The quantization-error probe kernels (quant_error, diff_partials) + normFinalize against a float64 count. */
import { describe, expect, it } from 'vitest';
import { buildQuantize, quantErrorPartials } from '../../src/engine/kernels/quantize/quantize';
import { normFinalize, sumSquaresPartialCount } from '../../src/engine/kernels/reduce/reduce';
import type { QuantFormat } from '../../src/engine/quant/formats';
import { dequantizeRef, type Granularity, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();

/** ‖x − x̂‖ and ‖x‖ in float64. */
function norms(x: Float32Array, xhat: Float32Array): [number, number] {
  let e = 0;
  let r = 0;
  for (let i = 0; i < x.length; i++) {
    e += (x[i] - xhat[i]) ** 2;
    r += x[i] ** 2;
  }
  return [Math.sqrt(e), Math.sqrt(r)];
}

describe('quantization-error partials', () => {
  it.each<[QuantFormat, Granularity, number]>([
    ['int4', { kind: 'group', size: 128 }, 5000],
    ['int8', { kind: 'row', rowLength: 96 }, 96 * 70],
    ['fp8-e4m3', { kind: 'column', rowLength: 64 }, 64 * 33],
  ])('%s %o, n = %i: ‖x − deq(q(x))‖ and ‖x‖ of the stored codes', async (format, granularity, n) => {
    const rt = await testRuntime();
    const rng = new Rng(7);
    // Heavy-tailed rows, so the error differs visibly between groups.
    const x = Float32Array.from(rng.normalArray(n), (v, i) => v * (1 + (i % 13 === 0 ? 20 : 0)));
    const xb = up(rt, x);
    const q = buildQuantize(rt, { format, granularity, n }, xb);
    const P = sumSquaresPartialCount(n);
    // Blocks at 256-byte offsets, as the probe lays them out, with garbage around them.
    const partials = up(rt, new Float32Array(64 + 64 + P + 64).fill(1e30));
    const out = track(rt.createBuffer('workspace', 'out', 64 * 4 * 2));
    rt.run([
      ...q.dispatches,
      quantErrorPartials(rt, { label: 't', x: xb, n, partials, errBase: 64, refBase: 128, stored: { spec: q.spec, words: q.words, scales: q.scales } }),
      normFinalize(rt, { label: 'e', partials: { buffer: partials, offset: 256, size: P * 4 }, count: P, out: { buffer: out, offset: 0, size: 4 } }),
      normFinalize(rt, { label: 'r', partials: { buffer: partials, offset: 512, size: P * 4 }, count: P, out: { buffer: out, offset: 256, size: 4 } }),
    ]);
    const got = await rt.readF32(out);
    q.destroy();
    const [e, r] = norms(x, dequantizeRef(quantizeRef(x, format, granularity)));
    expect(e).toBeGreaterThan(0);
    expect(got[0]).toBeCloseTo(e, 2);
    expect(Math.abs(got[0] - e) / e).toBeLessThan(1e-4);
    expect(Math.abs(got[64] - r) / r).toBeLessThan(1e-5);
  });

  it('diff_partials: the error of a given copy; zero for an exact copy', async () => {
    const rt = await testRuntime();
    const n = 3000;
    const x = Float32Array.from(new Rng(3).normalArray(n));
    const xhat = Float32Array.from(x, (v, i) => (i % 7 === 0 ? v * 0.5 : v));
    const P = sumSquaresPartialCount(n);
    const xb = up(rt, x);
    const partials = up(rt, new Float32Array(64 * 4));
    const out = track(rt.createBuffer('workspace', 'out', 64 * 4 * 3));
    const fin = (block: number, slot: number) =>
      normFinalize(rt, { label: `f${block}`, partials: { buffer: partials, offset: block * 256, size: P * 4 }, count: P, out: { buffer: out, offset: slot * 256, size: 4 } });
    rt.run([
      quantErrorPartials(rt, { label: 'd', x: xb, n, partials, errBase: 0, refBase: 64, xhat: up(rt, xhat) }),
      quantErrorPartials(rt, { label: 'z', x: xb, n, partials, errBase: 128, refBase: 192, xhat: up(rt, x) }),
      fin(0, 0), fin(1, 1), fin(2, 2),
    ]);
    const got = await rt.readF32(out);
    const [e, r] = norms(x, xhat);
    expect(Math.abs(got[0] - e) / e).toBeLessThan(1e-5);
    expect(Math.abs(got[64] - r) / r).toBeLessThan(1e-5);
    expect(got[128]).toBe(0);
  });

  it('refuses both or neither source and a short partials buffer', async () => {
    const rt = await testRuntime();
    const xb = up(rt, new Float32Array(512));
    const partials = up(rt, new Float32Array(4));
    expect(() => quantErrorPartials(rt, { label: 'x', x: xb, n: 512, partials, errBase: 0, refBase: 2 })).toThrow(/exactly one/);
    expect(() => quantErrorPartials(rt, { label: 'x', x: xb, n: 512, partials, errBase: 0, refBase: 4, xhat: xb })).toThrow(/partials/);
  });
});
