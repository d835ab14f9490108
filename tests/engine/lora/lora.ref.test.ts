import { describe, expect, it } from 'vitest';
import { loraBackwardRef, loraForwardRef, type LoraLinearRef } from '../../../src/engine/lora/lora.ref';
import { Rng } from '../../../src/engine/util/rng';

const rand = (rng: Rng, n: number) => Float64Array.from({ length: n }, () => rng.normal());

function layer(seed: number, dims: { n: number; in: number; out: number; r: number }, dropout = 0) {
  const rng = new Rng(seed);
  const l: LoraLinearRef = {
    w: rand(rng, dims.out * dims.in), a: rand(rng, dims.r * dims.in), b: rand(rng, dims.out * dims.r),
    in: dims.in, out: dims.out, r: dims.r, scale: 2.5,
  };
  if (dropout > 0) l.mask = Float64Array.from({ length: dims.n * dims.in }, () => (rng.next() < dropout ? 0 : 1 / (1 - dropout)));
  return { l, x: rand(rng, dims.n * dims.in), dy: rand(rng, dims.n * dims.out) };
}

/** L = Σ y ⊙ dy, so dL/dθ is what backward returns for θ. */
const lossOf = (l: LoraLinearRef, x: Float64Array, dy: Float64Array, n: number) =>
  loraForwardRef(l, x, n).y.reduce((s, v, i) => s + v * dy[i], 0);

/** Central differences of L over every element of `p` (mutated in place and restored). */
function numericGrad(p: Float64Array, f: () => number, h = 1e-5): Float64Array {
  const g = new Float64Array(p.length);
  for (let i = 0; i < p.length; i++) {
    const v = p[i];
    p[i] = v + h;
    const up = f();
    p[i] = v - h;
    const down = f();
    p[i] = v;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

function expectClose(got: Float64Array, want: Float64Array, rel = 1e-7) {
  const scale = Math.max(...Array.from(want, Math.abs));
  let worst = 0;
  for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(got[i] - want[i]));
  expect(worst / scale).toBeLessThan(rel);
}

describe('LoRA linear reference', () => {
  const dims = { n: 5, in: 7, out: 6, r: 3 };

  it('forward is the plain linear layer of W + s·B·A (no dropout)', () => {
    const { l, x } = layer(1, dims);
    const merged = new Float64Array(dims.out * dims.in);
    for (let o = 0; o < dims.out; o++) for (let i = 0; i < dims.in; i++) {
      let s = 0;
      for (let k = 0; k < dims.r; k++) s += l.b[o * dims.r + k] * l.a[k * dims.in + i];
      merged[o * dims.in + i] = l.w[o * dims.in + i] + l.scale * s;
    }
    const want = new Float64Array(dims.n * dims.out);
    for (let t = 0; t < dims.n; t++) for (let o = 0; o < dims.out; o++) {
      let s = 0;
      for (let i = 0; i < dims.in; i++) s += x[t * dims.in + i] * merged[o * dims.in + i];
      want[t * dims.out + o] = s;
    }
    expectClose(loraForwardRef(l, x, dims.n).y, want, 1e-13);
  });

  for (const dropout of [0, 0.3]) {
    it(`backward matches finite differences for x, A and B${dropout ? ' (with a dropout mask)' : ''}`, () => {
      const { l, x, dy } = layer(2 + dropout * 10, dims, dropout);
      const { dx, dA, dB } = loraBackwardRef(l, x, dy, dims.n);
      const f = () => lossOf(l, x, dy, dims.n);
      expectClose(dx, numericGrad(x, f));
      expectClose(dA, numericGrad(l.a as Float64Array, f));
      expectClose(dB, numericGrad(l.b as Float64Array, f));
    });
  }

  it('with B = 0 (PEFT init) the output is the base layer and A gets no gradient', () => {
    const { l, x, dy } = layer(3, dims);
    const l0 = { ...l, b: new Float64Array(dims.out * dims.r) };
    const plain = loraForwardRef({ ...l0, r: 0, a: [], b: [] }, x, dims.n).y;
    expect(Array.from(loraForwardRef(l0, x, dims.n).y)).toEqual(Array.from(plain));
    const g = loraBackwardRef(l0, x, dy, dims.n);
    expect(g.dA.every((v) => v === 0)).toBe(true);
    expect(g.dB.some((v) => v !== 0)).toBe(true);
  });

  it('rejects mismatched sizes', () => {
    const { l, x } = layer(4, dims);
    expect(() => loraForwardRef({ ...l, r: 2 }, x, dims.n)).toThrow(/a has 21 elements, want 2×7/);
    expect(() => loraBackwardRef(l, x, new Float64Array(3), dims.n)).toThrow(/dy has 3 elements/);
  });
});
