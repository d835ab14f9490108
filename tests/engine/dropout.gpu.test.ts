import { describe, expect, it } from 'vitest';
import { dropoutKernels } from '../../src/engine/kernels/dropout/dropout';
import { dropoutMaskRef, dropoutRef } from '../../src/engine/kernels/dropout/dropout.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('dropout kernels', () => {
  it('apply equals the plain-TS reference bit for bit, accumulateMasked adds through the same mask, inactive keeps every value', async () => {
    const rt = await testRuntime();
    const n = 5000;
    const p = 0.3;
    const x = new Rng(4).normalArray(n);
    const acc = new Rng(5).normalArray(n);
    const bx = rt.upload('workspace', 'test.drop.x', x);
    const out = rt.upload('workspace', 'test.drop.out', new Float32Array(n));
    const sum = rt.upload('workspace', 'test.drop.sum', acc);
    const k = dropoutKernels(rt, 'test.drop', n, p);
    try {
      k.setSeed(1234);
      rt.run([k.apply('test.drop', bx, out), k.accumulateMasked('test.drop', bx, sum)]);
      const want = dropoutRef(x, 1234, p);
      expect(new Uint32Array((await rt.readF32(out, 0, n)).buffer)).toEqual(new Uint32Array(want.buffer));
      const got = await rt.readF32(sum, 0, n);
      for (let i = 0; i < n; i++) expect(got[i], `${i}`).toBe(Math.fround(acc[i] + want[i]));
      const kept = dropoutMaskRef(n, 1234, p).reduce((a, b) => a + b, 0) / n;
      expect(Math.abs(kept - (1 - p))).toBeLessThan(0.03);
      k.setActive(false);
      rt.run([k.apply('test.drop', bx, out)]);
      expect(new Uint32Array((await rt.readF32(out, 0, n)).buffer)).toEqual(new Uint32Array(x.buffer));
    } finally {
      for (const b of [bx, out, sum]) rt.mem.free(b);
    }
  });

  it('destroy frees its parameter block (a model destroyed with LoRA dropout left one per adapter behind)', async () => {
    const rt = await testRuntime();
    const before = rt.mem.uniformBytes();
    const k = dropoutKernels(rt, 'test.drop.free', 64, 0.1);
    expect(rt.mem.uniformBytes()).toBeGreaterThan(before);
    k.destroy();
    expect(rt.mem.uniformBytes()).toBe(before);
  });
});
