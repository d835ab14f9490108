import { describe, expect, it } from 'vitest';
import { globalNorm, globalNormPartialsBytes } from '../../src/engine/kernels/reduce/reduce';
import { globalNormRef } from '../../src/engine/kernels/reduce/reduce.ref';
import { adamw, createAdamwStepBuffer, writeAdamwStep } from '../../src/engine/optim/adamw';
import { adamwRef, clipCoefRef } from '../../src/engine/optim/adamw.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track } = trackBuffers();

const hyper = { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

/**
 * Two parameter ranges in one flat buffer, as a model lays them out: [0, nA) decays, [offB, offB + nB)
 * does not (offB·4 is a multiple of 256 so the ranges bind as slices). One command buffer per step:
 * global grad norm over everything, then AdamW on each range reading that norm.
 */
async function run(nA: number, nB: number, maxNormOf: (norm: number) => number, steps = 5): Promise<number[]> {
  const rt = await testRuntime();
  const offB = Math.ceil(nA / 64) * 64;
  const total = offB + nB;
  const rng = new Rng(nA * 3 + nB);
  const p0 = rng.normalArray(total, 0.5);
  const param = track(rt.upload('weights', 'p', p0));
  const grad = track(rt.upload('grads', 'g', new Float32Array(total)));
  const m = track(rt.upload('optimizer', 'm', new Float32Array(total)));
  const v = track(rt.upload('optimizer', 'v', new Float32Array(total)));
  const partials = track(rt.createBuffer('workspace', 'partials', globalNormPartialsBytes(total)));
  const norm = track(rt.createBuffer('workspace', 'norm', 4));
  const stepBuf = track(createAdamwStepBuffer(rt));
  const slice = (b: GPUBuffer, off: number, n: number) => ({ buffer: b, offset: off * 4, size: n * 4 });
  const ds = [
    ...globalNorm(rt, { label: 'gn', x: grad, n: total, partials, out: norm }),
    adamw(rt, { label: 'A', param: slice(param, 0, nA), grad: slice(grad, 0, nA), m: slice(m, 0, nA), v: slice(v, 0, nA), n: nA, decay: true, stepParams: stepBuf, gradNorm: norm }),
    adamw(rt, { label: 'B', param: slice(param, offB, nB), grad: slice(grad, offB, nB), m: slice(m, offB, nB), v: slice(v, offB, nB), n: nB, decay: false, stepParams: stepBuf, gradNorm: norm }),
  ];
  const P = Float64Array.from(p0);
  const M = new Float64Array(total);
  const Vv = new Float64Array(total);
  const clips: number[] = [];
  for (let t = 1; t <= steps; t++) {
    const g = rng.normalArray(total, 0.05 * t);
    for (let i = nA; i < offB; i++) g[i] = 0; // padding between the ranges holds no gradient
    const gn = globalNormRef(g);
    const maxNorm = maxNormOf(gn);
    rt.write(grad, g);
    writeAdamwStep(rt, stepBuf, { ...hyper, step: t, maxNorm });
    rt.run(ds);
    const clip = clipCoefRef(gn, maxNorm);
    clips.push(clip);
    adamwRef(P.subarray(0, nA), g.subarray(0, nA), M.subarray(0, nA), Vv.subarray(0, nA), hyper, t, clip, true);
    adamwRef(P.subarray(offB), g.subarray(offB), M.subarray(offB), Vv.subarray(offB), hyper, t, clip, false);
    expect(Math.abs((await rt.readF32(norm, 0, 1))[0] - gn)).toBeLessThanOrEqual(1e-5 * gn);
  }
  const pick = (a: ArrayLike<number>) => [...Array.from(a).slice(0, nA), ...Array.from(a).slice(offB, total)];
  expectClose(pick(await rt.readF32(param, 0, total)), pick(P), { atol: 2e-6, rtol: 1e-5, label: 'param' });
  expectClose(pick(await rt.readF32(m, 0, total)), pick(M), { atol: 1e-7, rtol: 1e-5, label: 'm' });
  expectClose(pick(await rt.readF32(v, 0, total)), pick(Vv), { atol: 1e-9, rtol: 1e-5, label: 'v' });
  // The padding between ranges is never touched.
  const pad = (await rt.readF32(param, 0, total)).subarray(nA, offB);
  expect(Array.from(pad)).toEqual(Array.from(p0.subarray(nA, offB)));
  return clips;
}

describe('AdamW GPU vs reference (several steps, decay and no-decay ranges)', () => {
  it('clipping active (max_norm = half the gradient norm)', async () => {
    const clips = await run(1000, 65, (n) => 0.5 * n);
    expect(clips.every((c) => c < 0.51 && c > 0.49)).toBe(true);
  });
  it('clipping inactive (max_norm far above the norm)', async () => {
    expect(await run(1000, 65, () => 1e6)).toEqual([1, 1, 1, 1, 1]);
  });
  it('clipping disabled (max_norm 0)', () => run(7, 63, () => 0));
  it('tiny ranges', () => run(1, 1, (n) => 0.9 * n, 3));
});
