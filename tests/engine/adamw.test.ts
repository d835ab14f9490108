import { describe, expect, it } from 'vitest';
import { ADAMW_STEP_BYTES, packAdamwStep } from '../../src/engine/optim/adamw';
import { adamwRef, clipCoefRef } from '../../src/engine/optim/adamw.ref';

const hyper = { lr: 1e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

describe('adamw reference', () => {
  it('first step moves each weight by about lr * sign(g) after decoupled decay', () => {
    const p = Float64Array.from([1, -2, 0.5]);
    const g = [0.3, -4, 1e-3];
    const m = new Float64Array(3);
    const v = new Float64Array(3);
    adamwRef(p, g, m, v, hyper, 1);
    // Step 1: m̂ = g, v̂ = g², so the update is lr·g/(|g| + eps) (eps is negligible here).
    const want = [1, -2, 0.5].map((w, i) => w * (1 - hyper.lr * hyper.weightDecay) - hyper.lr * g[i] / (Math.abs(g[i]) + hyper.eps));
    for (let i = 0; i < 3; i++) expect(p[i]).toBeCloseTo(want[i], 12);
    expect(m[1]).toBeCloseTo(0.1 * -4, 14);
    expect(v[1]).toBeCloseTo(0.05 * 16, 14);
  });

  it('matches a hand-unrolled second step, without decay, with clipping', () => {
    const p = Float64Array.from([0.7]);
    const m = new Float64Array(1);
    const v = new Float64Array(1);
    const clip = clipCoefRef(5, 1);
    adamwRef(p, [2], m, v, hyper, 1, clip, false);
    adamwRef(p, [-1], m, v, hyper, 2, clip, false);
    const g1 = 2 * clip;
    const g2 = -1 * clip;
    let pm = 0.7;
    pm -= (hyper.lr / 0.1) * (0.1 * g1) / (Math.sqrt(0.05 * g1 * g1) / Math.sqrt(0.05) + hyper.eps);
    const m2 = 0.9 * 0.1 * g1 + 0.1 * g2;
    const v2 = 0.95 * 0.05 * g1 * g1 + 0.05 * g2 * g2;
    pm -= (hyper.lr / (1 - 0.81)) * m2 / (Math.sqrt(v2) / Math.sqrt(1 - 0.95 * 0.95) + hyper.eps);
    expect(p[0]).toBeCloseTo(pm, 14);
  });

  it('clip coefficient follows clip_grad_norm_', () => {
    expect(clipCoefRef(0.5, 1)).toBe(1);
    expect(clipCoefRef(4, 1)).toBeCloseTo(1 / (4 + 1e-6), 15);
    expect(clipCoefRef(1e9, 0)).toBe(1);
    expect(clipCoefRef(1e9, -1)).toBe(1);
  });

  it('packs the step params with float64-derived bias corrections', () => {
    const buf = packAdamwStep({ ...hyper, step: 3, maxNorm: 1 });
    expect(buf.byteLength).toBe(ADAMW_STEP_BYTES);
    const f = new Float32Array(buf);
    const u = new Uint32Array(buf);
    expect(f[0]).toBe(Math.fround(1 - 1e-4));
    expect(f[1]).toBe(Math.fround(0.1));
    expect(f[2]).toBe(Math.fround(0.95));
    expect(f[3]).toBe(Math.fround(1 - 0.95));
    expect(f[4]).toBe(Math.fround(1e-3 / (1 - 0.9 ** 3)));
    expect(f[5]).toBe(Math.fround(Math.sqrt(1 - 0.95 ** 3)));
    expect(f[6]).toBe(Math.fround(1e-8));
    expect(f[7]).toBe(1);
    expect(f[8]).toBe(Math.fround(1e-3));
    expect(u[9]).toBe(3);
    expect(() => packAdamwStep({ ...hyper, step: 0, maxNorm: 1 })).toThrow();
  });
});
