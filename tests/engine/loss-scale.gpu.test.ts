/**
 * Loss scaling on the GPU (optim/loss-scale-gpu.ts) against the CPU scaler (optim/loss-scale.ts)
 * and against plain AdamW on the unscaled gradients: a scripted run with inf and NaN gradients,
 * growth and back-off, each step's state read back.
 */
import { describe, expect, it } from 'vitest';
import { globalNorm, globalNormPartialsBytes } from '../../src/engine/kernels/reduce/reduce';
import { adamw, createAdamwStepBuffer, writeAdamwStep } from '../../src/engine/optim/adamw';
import { decideScaledStep, LossScaler } from '../../src/engine/optim/loss-scale';
import {
  ADAMW_SCALED_SRC, adamwScaled, createLossScaleState, LOSS_SCALE_STATE_BYTES, lossScaleCheck, lossScaleUpdate, packLossScaleState,
  readLossScaleState, unpackLossScaleState,
} from '../../src/engine/optim/loss-scale-gpu';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track } = trackBuffers();
const hyper = { lr: 3e-3, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

describe('loss scaling on the GPU', () => {
  it('packs and unpacks the state', () => {
    const cfg = { growthFactor: 2, backoffFactor: 0.5, growthInterval: 7 };
    const s = unpackLossScaleState(packLossScaleState({ scale: 1024, growthTracker: 5, ...cfg }, 3), cfg);
    expect(s).toEqual({ ...cfg, scale: 1024, invScale: 1 / 1024, growthTracker: 5, skipped: 3, foundInf: false, norm: 0 });
    expect(new LossScaler().state()).toEqual(new LossScaler({ ...cfg, growthInterval: 2000 }).state());
    expect(ADAMW_SCALED_SRC).toContain('let g = (grad[i] * gnorm[1]) * clip;');
  });

  it('matches GradScaler step for step: skips inf/NaN steps, backs off, grows; updates equal plain AdamW on the unscaled gradients', async () => {
    const rt = await testRuntime();
    const n = 777;
    const cfg = { growthFactor: 2, backoffFactor: 0.5, growthInterval: 3 };
    const cpu = new LossScaler({ initScale: 2 ** 10, ...cfg });
    const rng = new Rng(9);
    const p0 = rng.normalArray(n, 0.5);
    const up = (d: Float32Array, label: string) => track(rt.upload('weights', label, d));
    // Scaled path and, beside it, plain AdamW on the unscaled gradients (the reference).
    const [param, m, v, grad] = [up(p0, 'p'), up(new Float32Array(n), 'm'), up(new Float32Array(n), 'v'), up(new Float32Array(n), 'g')];
    const [rparam, rm, rv, rgrad] = [up(p0, 'rp'), up(new Float32Array(n), 'rm'), up(new Float32Array(n), 'rv'), up(new Float32Array(n), 'rg')];
    const partials = track(rt.createBuffer('workspace', 'partials', globalNormPartialsBytes(n)));
    const rpartials = track(rt.createBuffer('workspace', 'rpartials', globalNormPartialsBytes(n)));
    const norm = track(rt.createBuffer('workspace', 'norm', 4));
    const rnorm = track(rt.createBuffer('workspace', 'rnorm', 4));
    const stepBuf = track(createAdamwStepBuffer(rt));
    const state = track(createLossScaleState(rt, cpu.state()));
    expect(state.size).toBeGreaterThanOrEqual(LOSS_SCALE_STATE_BYTES);
    const scaled = [
      ...globalNorm(rt, { label: 'gn', x: grad, n, partials, out: norm }),
      lossScaleCheck(rt, { label: 'ls', gradNorm: norm, state }),
      adamwScaled(rt, { label: 'A', param, grad, m, v, n, decay: true, stepParams: stepBuf, state }),
      lossScaleUpdate(rt, { label: 'ls', state, cfg }),
    ];
    const plain = [
      ...globalNorm(rt, { label: 'rgn', x: rgrad, n, partials: rpartials, out: rnorm }),
      adamw(rt, { label: 'R', param: rparam, grad: rgrad, m: rm, v: rv, n, decay: true, stepParams: stepBuf, gradNorm: rnorm }),
    ];
    // Steps 3 and 6 overflow (inf, then NaN); 1-2, 4-5, 7-9 are good: growth after 3 good steps at 9.
    const bad: Record<number, number> = { 3: Infinity, 6: NaN };
    let applied = 0;
    const trace: [number, number, number, boolean][] = [];
    for (let t = 1; t <= 9; t++) {
      const g = rng.normalArray(n, 0.05 * t);
      const gs = g.map((x) => x * cpu.scale); // what a backward seeded with the scale produces
      if (t in bad) gs[123] = bad[t];
      const maxNorm = 0.6;
      const d = decideScaledStep(cpu, Math.sqrt(gs.reduce((s, x) => s + x * x, 0)), maxNorm);
      // AdamW's bias correction counts applied steps (torch's optimizer.step is not called on a skip).
      writeAdamwStep(rt, stepBuf, { ...hyper, step: applied + 1, maxNorm });
      rt.write(grad, gs);
      rt.run(scaled);
      if (d.kind === 'step') {
        rt.write(rgrad, g);
        rt.run(plain);
        applied++;
      }
      cpu.update(d.kind === 'skip');
      const s = await readLossScaleState(rt, state, cfg);
      trace.push([t, s.scale, s.growthTracker, s.foundInf]);
      expect([t, s.scale, s.growthTracker, s.foundInf]).toEqual([t, cpu.scale, cpu.growthTracker, d.kind === 'skip']);
      expect(s.invScale).toBe(cpu.invScale);
      if (d.kind === 'step') expect(s.norm).toBe((await rt.readF32(rnorm, 0, 1))[0]); // the unscaled norm, exactly
      else expect(Number.isFinite(s.norm)).toBe(false);
      // Bit for bit the plain update on the unscaled gradients (a power-of-two scale unscales exactly); unchanged on a skip.
      for (const [a, b] of [[param, rparam], [m, rm], [v, rv]]) {
        expect(Array.from(await rt.readU32(a, 0, n))).toEqual(Array.from(await rt.readU32(b, 0, n)));
      }
    }
    expect(trace.map(([, s]) => s)).toEqual([1024, 1024, 512, 512, 512, 256, 256, 256, 512]);
    const end = await readLossScaleState(rt, state, cfg);
    expect(end.skipped).toBe(2);
    // A checkpoint of the GPU state restores the CPU scaler.
    const restored = LossScaler.fromState({ scale: end.scale, growthTracker: end.growthTracker, ...cfg });
    expect(restored.state()).toEqual(cpu.state());
  });
});
