import { describe, expect, it } from 'vitest';
import {
  decideScaledStep, LOSS_SCALE_DEFAULTS, LossScaler, type LossScalerState, scaledStep, updateLossScale,
} from '../../src/engine/optim/loss-scale';

/** f32 global L2 norm, summed in order (what reduce.wgsl's norm is, up to summation order). */
function norm32(g: Float32Array): number {
  let s = 0;
  for (const x of g) s = Math.fround(s + Math.fround(x * x));
  return Math.fround(Math.sqrt(s));
}

describe('LossScaler (torch.amp.GradScaler semantics)', () => {
  it('starts from GradScaler\'s defaults', () => {
    const l = new LossScaler();
    expect(LOSS_SCALE_DEFAULTS).toEqual({ initScale: 65536, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000 });
    expect(l.scale).toBe(65536);
    expect(l.invScale).toBe(2 ** -16);
    expect(l.state()).toEqual({ scale: 65536, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000, growthTracker: 0 });
  });

  it('scales the loss', () => {
    const l = new LossScaler({ initScale: 1024 });
    expect(l.scaleLoss(2.5)).toBe(2560);
    expect(l.scaleLoss(0.1)).toBe(Math.fround(0.1 * 1024));
  });

  it('follows GradScaler step for step on a scripted sequence (growth, back-off, tracker reset on skip)', () => {
    // The trace torch.amp.GradScaler(init_scale=8, growth_interval=3) gives for these found_inf
    // values, by _amp_update_scale_: inf → scale·0.5, tracker 0; else tracker+1, and at 3 → scale·2, tracker 0.
    const steps: [boolean, number, number][] = [ // found inf, scale after, tracker after
      [false, 8, 1], [false, 8, 2], [false, 16, 0], // grows after 3 good steps
      [false, 16, 1], [true, 8, 0], // a skip backs off and resets the count
      [false, 8, 1], [false, 8, 2], [true, 4, 0], // 2 good steps then inf: no growth, count reset
      [true, 2, 0], [true, 1, 0], // consecutive skips keep backing off
      [false, 1, 1], [false, 1, 2], [false, 2, 0], [false, 2, 1], [false, 2, 2], [false, 4, 0],
    ];
    const l = new LossScaler({ initScale: 8, growthInterval: 3 });
    steps.forEach(([inf, scale, tracker], i) => {
      l.update(inf);
      expect([i, l.scale, l.growthTracker]).toEqual([i, scale, tracker]);
    });
  });

  it('grows after growthInterval good steps with the default interval of 2000', () => {
    const l = new LossScaler();
    for (let i = 0; i < 1999; i++) l.update(false);
    expect([l.scale, l.growthTracker]).toEqual([65536, 1999]);
    l.update(false);
    expect([l.scale, l.growthTracker]).toEqual([131072, 0]);
  });

  it('keeps the scale when growing would overflow f32, but still restarts the count', () => {
    const l = new LossScaler({ initScale: 2 ** 127, growthInterval: 1 });
    l.update(false);
    expect([l.scale, l.growthTracker]).toEqual([2 ** 127, 0]);
  });

  it('uses the configured factors, in f32', () => {
    const l = new LossScaler({ initScale: 1000, growthFactor: 3, backoffFactor: 0.3, growthInterval: 1 });
    l.update(false);
    expect(l.scale).toBe(3000);
    l.update(true);
    expect(l.scale).toBe(Math.fround(3000 * 0.3));
    expect(l.invScale).toBe(Math.fround(1 / Math.fround(900)));
  });

  it('does nothing when disabled', () => {
    const l = new LossScaler({ enabled: false });
    expect([l.scale, l.invScale, l.scaleLoss(3)]).toEqual([1, 1, 3]);
    l.update(true);
    expect(l.scale).toBe(1);
    expect(decideScaledStep(l, NaN, 1).kind).toBe('step');
  });

  it('round-trips through a checkpoint, mid-interval, and continues identically', () => {
    const a = new LossScaler({ initScale: 64, growthInterval: 4 });
    [false, true, false, false].forEach((x) => a.update(x));
    const saved: LossScalerState = JSON.parse(JSON.stringify(a.state()));
    expect(saved).toEqual({ scale: 32, growthFactor: 2, backoffFactor: 0.5, growthInterval: 4, growthTracker: 2 });
    const b = LossScaler.fromState(saved);
    for (const inf of [false, false, false, true, false]) {
      a.update(inf);
      b.update(inf);
      expect(b.state()).toEqual(a.state());
    }
    expect(a.scale).toBe(32); // 2 more good → 64, 1 good, inf → 32
  });

  it('rejects a corrupt checkpoint', () => {
    const ok = new LossScaler().state();
    for (const bad of [{ scale: 0 }, { scale: Infinity }, { growthTracker: 2000 }, { growthTracker: -1 }, { growthInterval: 0 }, { backoffFactor: 1 }, { growthFactor: 1 }]) {
      expect(() => LossScaler.fromState({ ...ok, ...bad })).toThrow(/LossScaler.load/);
    }
  });

  it('updateLossScale is the pure state machine the class runs', () => {
    const s: LossScalerState = { scale: 4, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2, growthTracker: 1 };
    expect(updateLossScale(s, false)).toEqual({ ...s, scale: 8, growthTracker: 0 });
    expect(updateLossScale(s, true)).toEqual({ ...s, scale: 2, growthTracker: 0 });
    expect(s.scale).toBe(4); // not mutated
  });
});

describe('decideScaledStep (found-inf from the global gradient norm)', () => {
  it('skips on an inf or NaN norm, and the scaler backs off', () => {
    for (const n of [Infinity, NaN]) {
      const l = new LossScaler({ initScale: 1024, growthInterval: 10 });
      l.update(false);
      const d = scaledStep(l, n, 1);
      expect(d.kind).toBe('skip');
      expect(Object.is(d.gradNorm, n)).toBe(true);
      expect([l.scale, l.growthTracker]).toEqual([512, 0]);
    }
  });

  it('an inf or NaN gradient makes the f32 global norm non-finite', () => {
    for (const bad of [Infinity, -Infinity, NaN]) {
      const g = new Float32Array([0.5, -2, bad, 3]);
      expect(Number.isFinite(norm32(g))).toBe(false);
    }
    // f16 gradients scaled to their largest values still give a finite norm over many parameters.
    expect(Number.isFinite(norm32(new Float32Array(100000).fill(65504)))).toBe(true);
  });

  it('unscales before clipping: the same update as unscale_ then clip_grad_norm_, bit for bit', () => {
    const scale = 2 ** 12;
    const l = new LossScaler({ initScale: scale });
    const g = Float32Array.from({ length: 257 }, (_, i) => Math.sin(i * 1.7) * (i % 7 === 0 ? 3 : 0.01));
    const scaled = g.map((x) => Math.fround(x * scale));
    for (const maxNorm of [0, 0.1, 1, 100]) {
      // torch: scaler.unscale_(opt) (grad *= inv_scale), then clip_grad_norm_ on the unscaled grads.
      const unscaled = scaled.map((x) => Math.fround(x * l.invScale));
      const trueNorm = norm32(unscaled);
      const coef = maxNorm > 0 ? Math.min(1, Math.fround(maxNorm / Math.fround(trueNorm + 1e-6))) : 1;
      const torchGrads = unscaled.map((x) => Math.fround(x * coef));
      const d = decideScaledStep(l, norm32(scaled), maxNorm);
      if (d.kind !== 'step') throw new Error('expected a step');
      expect(d.gradNorm).toBe(trueNorm); // a power-of-two scale unscales exactly
      expect(d.clipCoef).toBe(coef);
      const ours = scaled.map((x) => Math.fround(Math.fround(x * d.unscale) * d.clipCoef));
      expect(ours).toEqual(torchGrads);
      if (maxNorm === 0.1) expect(d.clipCoef).toBeLessThan(1); // clipping on the true norm, not the scaled one
      if (maxNorm === 100) expect(d.clipCoef).toBe(1);
    }
  });

  it('a finite step counts toward growth; the skip resets the count', () => {
    const l = new LossScaler({ initScale: 8, growthInterval: 3 });
    scaledStep(l, 5, 1);
    scaledStep(l, 5, 1);
    expect(l.growthTracker).toBe(2);
    scaledStep(l, NaN, 1);
    expect([l.scale, l.growthTracker]).toEqual([4, 0]);
    scaledStep(l, 5, 1);
    scaledStep(l, 5, 1);
    scaledStep(l, 5, 1);
    expect([l.scale, l.growthTracker]).toEqual([8, 0]);
  });
});
