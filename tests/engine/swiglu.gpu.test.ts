import { describe, expect, it } from 'vitest';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { swigluBackward, swigluForward } from '../../src/engine/kernels/swiglu/swiglu';
import { swigluBackwardRef, swigluForwardRef } from '../../src/engine/kernels/swiglu/swiglu.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

/** inPlace: the forward writes h over up, the backward dgate over gate and dup over up ('up') or over dh ('dh'). */
async function check(N: number, F: number, inPlace: false | 'up' | 'dh', vectorize = true): Promise<Float32Array[]> {
  const rt = await testRuntime();
  const rng = new Rng(N * 31 + F);
  const n = N * F;
  // Wide gate range: deep in both saturated tails of the sigmoid (|g| up to ~40).
  const gate = rng.normalArray(n, 8);
  if (n > 2) {
    gate[0] = -100;
    gate[1] = 100;
  }
  const upv = rng.normalArray(n);
  const dh = rng.normalArray(n);
  const bg = up(rt, gate);
  const bu = up(rt, upv);
  // In place, the forward writes h over up: run it on a copy so the backward still sees up.
  const bh = inPlace ? up(rt, upv) : up(rt, new Float32Array(n));
  const bdh = up(rt, dh);
  const bdg = inPlace ? bg : up(rt, new Float32Array(n));
  const bdu = inPlace === 'up' ? bu : inPlace === 'dh' ? bdh : up(rt, new Float32Array(n));
  const dims = { N, F };
  rt.run([
    swigluForward(rt, { label: 's', gate: bg, up: inPlace ? bh : bu, h: bh, dims, vectorize }),
    swigluBackward(rt, { label: 's', gate: bg, up: bu, dh: bdh, dgate: bdg, dup: bdu, dims, vectorize }),
  ]);
  const h = swigluForwardRef(gate, upv);
  const { dgate, dup } = swigluBackwardRef(gate, upv, dh);
  const got = [await rt.readF32(bh, 0, n), await rt.readF32(bdg, 0, n), await rt.readF32(bdu, 0, n)];
  expectClose(got[0], h, { atol: 1e-6, rtol: 1e-5, label: 'h' });
  expectClose(got[1], dgate, { atol: 1e-6, rtol: 1e-5, label: 'dgate' });
  expectClose(got[2], dup, { atol: 1e-6, rtol: 1e-5, label: 'dup' });
  return got;
}

describe('swiglu GPU vs reference', () => {
  for (const [N, F] of [[1, 1], [7, 7], [63, 65], [65, 384], [1000, 65]]) {
    it(`N=${N} F=${F}`, () => check(N, F, false));
  }
  it('in place: forward h over up, backward dgate over gate and dup over up', () => check(63, 384, 'up'));
  it('in place: backward dgate over gate and dup over dh', () => check(63, 384, 'dh'));
  it('in place needs dgate = gate together with dup over up or dh', async () => {
    const rt = await testRuntime();
    const [g, u, d, x] = [0, 1, 2, 3].map(() => up(rt, new Float32Array(4)));
    const dims = { N: 1, F: 4 };
    expect(() => swigluBackward(rt, { label: 's', gate: g, up: u, dh: d, dgate: g, dup: x, dims })).toThrow(/in place needs/);
    expect(() => swigluBackward(rt, { label: 's', gate: g, up: u, dh: d, dgate: x, dup: d, dims })).toThrow(/in place needs/);
  });
  it('vec4 elements (counts of 4, aligned bindings) give the scalar kernels\' bits, in place or not', async () => {
    for (const inPlace of [false, 'up', 'dh'] as const) {
      const [vec, scalar] = [await check(65, 384, inPlace, true), await check(65, 384, inPlace, false)];
      vec.forEach((v, i) => expect(Buffer.from(v.buffer).equals(Buffer.from(scalar[i].buffer)), `${inPlace} output ${i}`).toBe(true));
    }
  });
  it('2-D grid', async () => {
    setGridMaxX(5);
    await check(65, 65, false);
    await check(64, 96, false); // vec4: 6 workgroups of 256 × 4 elements
  });
});
