import { describe, expect, it } from 'vitest';
import { globalNorm, globalNormMulti, globalNormPartialsBytes, SUMSQ_MAX_PARTIALS } from '../../src/engine/kernels/reduce/reduce';
import { globalNormRef } from '../../src/engine/kernels/reduce/reduce.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();

describe('global norm (two-stage sum of squares)', () => {
  // 300000 > 256 · 1024 exercises the grid-stride loop of stage 1 at the partial cap.
  for (const n of [1, 7, 63, 65, 1000, 300_000]) {
    it(`matches the float64 norm and is bit-reproducible, n=${n}`, async () => {
      const rt = await testRuntime();
      const x = new Rng(n).normalArray(n, 0.01);
      const bx = up(rt, x);
      const partials = track(rt.createBuffer('workspace', 'partials', globalNormPartialsBytes(n)));
      const out = track(rt.createBuffer('workspace', 'norm', 4));
      const ds = globalNorm(rt, { label: 'gn', x: bx, n, partials, out });
      rt.run(ds);
      const a = (await rt.readF32(out, 0, 1))[0];
      rt.run(ds);
      const b = (await rt.readF32(out, 0, 1))[0];
      const want = globalNormRef(x);
      expect(Math.abs(a - want)).toBeLessThanOrEqual(2e-6 * want);
      expect(b).toBe(a);
    });
  }

  it('sums over several buffers (and slices) into one norm', async () => {
    const rt = await testRuntime();
    const rng = new Rng(77);
    const xs = [rng.normalArray(5), rng.normalArray(70_000, 3), rng.normalArray(129)];
    const bufs = xs.map((x) => up(rt, x));
    const big = up(rt, new Float32Array(64 + 129).fill(100));
    rt.write(big, xs[2], 256); // the third part is a slice at offset 256 B; the 100s around it must be ignored
    const parts = [
      { x: bufs[0], n: 5 },
      { x: bufs[1], n: 70_000 },
      { x: { buffer: big, offset: 256, size: 129 * 4 }, n: 129 },
    ];
    const partials = track(rt.createBuffer('workspace', 'partials', globalNormPartialsBytes(parts.map((p) => p.n))));
    const out = track(rt.createBuffer('workspace', 'norm', 4));
    rt.run(globalNormMulti(rt, { label: 'gnm', parts, partials, out }));
    const got = (await rt.readF32(out, 0, 1))[0];
    const want = globalNormRef(...xs);
    expect(Math.abs(got - want)).toBeLessThanOrEqual(2e-6 * want);
    expect(globalNormPartialsBytes(parts.map((p) => p.n))).toBeLessThan(4 * SUMSQ_MAX_PARTIALS);
  });
});
