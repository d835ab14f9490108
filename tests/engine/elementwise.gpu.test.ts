import { afterAll, describe, expect, it } from 'vitest';
import { add, axpy, copy, fill, scale } from '../../src/engine/kernels/elementwise/elementwise';
import { addRef, axpyRef, fillRef, scaleRef } from '../../src/engine/kernels/elementwise/elementwise.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();
afterAll(() => setGridMaxX(null));

describe.each([
  { grid: 'native grid', maxX: null },
  { grid: '2-D grid (x capped at 3)', maxX: 3 },
])('elementwise on $grid', ({ maxX }) => {
  for (const n of [1, 7, 63, 65, 1000, 4099, 8192]) {
    it(`add / axpy / copy / fill / scale, n=${n}`, async () => {
      const rt = await testRuntime();
      setGridMaxX(maxX);
      const rng = new Rng(n);
      const a = rng.normalArray(n);
      const b = rng.normalArray(n);
      const o = rng.normalArray(n);
      const ba = up(rt, a);
      const bb = up(rt, b);
      const bSum = up(rt, new Float32Array(n));
      const bAxpy = up(rt, o);
      const bCopy = up(rt, new Float32Array(n + 3).fill(9)); // copies n only
      const bFill = up(rt, new Float32Array(n));
      const bScale = up(rt, o);
      rt.run([
        add(rt, { label: 't', a: ba, b: bb, out: bSum, n }),
        axpy(rt, { label: 't', x: ba, out: bAxpy, alpha: -0.75, n }),
        copy(rt, { label: 't', src: ba, dst: bCopy, n }),
        fill(rt, { label: 't', out: bFill, value: 2.5, n }),
        scale(rt, { label: 't', out: bScale, alpha: 3, n }),
      ]);
      expectClose(await rt.readF32(bSum, 0, n), addRef(a, b), { atol: 1e-6, rtol: 1e-6, label: 'add' });
      expectClose(await rt.readF32(bAxpy, 0, n), axpyRef(o, a, -0.75), { atol: 1e-6, rtol: 1e-6, label: 'axpy' });
      const c = await rt.readF32(bCopy, 0, n + 3);
      expect(Array.from(c.subarray(0, n))).toEqual(Array.from(a));
      expect(Array.from(c.subarray(n))).toEqual([9, 9, 9]);
      expectClose(await rt.readF32(bFill, 0, n), fillRef(n, 2.5), { atol: 0, label: 'fill' });
      expectClose(await rt.readF32(bScale, 0, n), scaleRef(o, 3), { atol: 1e-6, rtol: 1e-6, label: 'scale' });
    });
  }
});

describe('elementwise beyond 65535 workgroups', () => {
  it('fill and scale reach the last element of 65535·256 + 300 floats', async () => {
    const rt = await testRuntime();
    const n = 65535 * 256 + 300;
    const buf = track(rt.createBuffer('activations', 'big', n * 4));
    rt.run([fill(rt, { label: 'big', out: buf, value: 1.5, n }), scale(rt, { label: 'big', out: buf, alpha: 2, n })]);
    const head = await rt.readF32(buf, 0, 4);
    const tail = await rt.readF32(buf, (n - 400) * 4, 400);
    expect(Array.from(head)).toEqual([3, 3, 3, 3]);
    expect(tail.every((v) => v === 3)).toBe(true);
  });
});

describe('elementwise on slices', () => {
  it('axpy on 256-byte-aligned slices leaves the rest untouched', async () => {
    const rt = await testRuntime();
    const out = up(rt, new Float32Array(200).fill(1));
    const x = up(rt, new Float32Array(200).fill(2));
    rt.run([axpy(rt, { label: 's', x: { buffer: x, offset: 256, size: 40 }, out: { buffer: out, offset: 512, size: 40 }, alpha: 1, n: 10 })]);
    const r = await rt.readF32(out, 0, 200);
    expect(r[127]).toBe(1);
    expect(Array.from(r.subarray(128, 138))).toEqual(new Array(10).fill(3));
    expect(r[138]).toBe(1);
  });
});
