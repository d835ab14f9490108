/**
 * Dynamic loss scaling in the trainer (plan.lossScale; forced on an fp32 plan here, since SwiftShader
 * has no shader-f16): a scaled run against an unscaled one, step by step. With a power-of-two scale
 * every backward operation is linear in the loss gradient, so the scaled gradients are the unscaled
 * ones × scale exactly (no value of this micro run is near f32's subnormal range or overflow) and the
 * weights and Adam moments must match bit for bit; an overflowing scale skips the step, leaves weights
 * and Adam state alone and halves the scale; growth after growthInterval clean steps; clipping sees
 * the unscaled norm; Adam's step advances on applied steps only; a checkpoint keeps the scaler and
 * restoring it (what resume does) is checked against the plan.
 */
import { describe, expect, it } from 'vitest';
import { type CheckpointFilesIn, loadCheckpoint } from '../../src/engine/io/checkpoint';
import { packLossScaleState } from '../../src/engine/optim/loss-scale-gpu';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { type LossScaleCheckpoint, type StepMetrics, Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
const tok = CharTokenizer.fromText(text);
// Constant lr (min_lr = lr, no warmup), so a step after a skip can be compared with the unscaled run's;
// grad_clip small enough that clipping is active every step.
const opts = defaultTrainOptions('micro', {
  steps: 20, batch: 2, seq: 16, lr: 1e-2, minLr: 1e-2, warmup: 0, model: { vocab_size: tok.vocabSize, num_hidden_layers: 1 },
});
opts.optimizer.grad_clip = 0.05;
const lossScale = { always: true, initScale: 2 ** 10, growthInterval: 2 };

const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);

describe('loss scaling in the trainer', () => {
  it('resolves a scaled fp32 plan with the state buffer', () => {
    const plan = resolveTrainingPlan(opts, { lossScale });
    expect(plan.lossScaling).toBe(true);
    expect(plan.model.lossScale).toEqual({ initScale: 1024, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2 });
    expect(plan.model.buffers.find((b) => b.key === 'lossScale')?.bytes).toBe(32);
    const plain = resolveTrainingPlan(opts);
    expect(plain.lossScaling).toBe(false);
    expect(plain.model.buffers.some((b) => b.key === 'lossScale')).toBe(false);
    expect(plain.memory.total).toBeLessThan(plan.memory.total);
    expect(() => resolveTrainingPlan(opts, { lossScale: { ...lossScale, growthInterval: 0 } })).toThrow(/growthInterval/);
  });

  it('scales, skips, backs off and grows like GradScaler; equals the unscaled run bit for bit; checkpoints keep it', async () => {
    const rt = await testRuntime();
    const ref = await Trainer.create(rt, opts, text, { tokenizer: tok });
    const plan = resolveTrainingPlan({ ...opts, model: { ...opts.model, vocab_size: tok.vocabSize } }, { lossScale });
    const sc = await Trainer.create(rt, opts, text, { tokenizer: tok, plan });
    try {
      const same = async (label: string) => {
        const [a, b] = [await ref.trainingState(), await sc.trainingState()];
        for (const k of ['weights', 'm', 'v'] as const) expect(bits(b[k]), `${label} ${k}`).toEqual(bits(a[k]));
      };
      // Steps 0-2: clean; the scale grows after 2 (growthInterval) clean steps.
      const scales: number[] = [];
      for (let s = 0; s < 3; s++) {
        const [r, m] = [await ref.trainStep(), await sc.trainStep()];
        expect(m.loss).toBe(r.loss);
        // The reported norm is the unscaled one, and clipping used it (the weights below match).
        expect(m.grad_norm).toBe(r.grad_norm);
        expect(r.grad_norm).toBeGreaterThan(opts.optimizer.grad_clip);
        expect(m.skipped_steps).toBe(0);
        expect(r.loss_scale).toBeUndefined();
        scales.push(m.loss_scale!);
        await same(`step ${s}`);
      }
      expect(scales).toEqual([2 ** 10, 2 ** 11, 2 ** 11]);

      // Step 3 with a scale that overflows the gradients' norm: skipped, nothing changes, the scale halves.
      rt.write(sc.model.b('lossScale'), new Uint8Array(packLossScaleState({ ...plan.model.lossScale!, scale: 2 ** 120, growthTracker: 1 })));
      const before = await sc.trainingState();
      const skip: StepMetrics = await sc.trainStep();
      expect(Number.isFinite(skip.grad_norm)).toBe(false);
      expect(skip.loss_scale).toBe(2 ** 119);
      expect(skip.skipped_steps).toBe(1);
      const after = await sc.trainingState();
      for (const k of ['weights', 'm', 'v'] as const) expect(bits(after[k]), k).toEqual(bits(before[k]));
      expect(await sc.lossScaleState()).toMatchObject({ scale: 2 ** 119, growthTracker: 0, skipped: 1, foundInf: true });

      // The checkpoint keeps the scaler; a run resumed from it starts from the same state.
      const ck = await sc.checkpoint();
      const lab = JSON.parse(ck['lab.json']!) as { train: { lossScale: LossScaleCheckpoint } };
      expect(lab.train.lossScale).toEqual({ scale: 2 ** 119, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2, growthTracker: 0, skipped: 1 });
      expect(loadCheckpoint(ck as unknown as CheckpointFilesIn).extra?.optimizer?.step).toBe(4);
      // A data-parallel late joiner's state carries it too (restoreTrainingState restores it).
      expect((await sc.trainingState()).lossScale).toEqual(lab.train.lossScale);
      expect((await ref.trainingState()).lossScale).toBeUndefined();
      // Resume (Trainer.create with optimizer.lossScale) restores it so; a bad state is refused.
      expect(() => sc.restoreLossScale({ ...lab.train.lossScale, growthInterval: 3 })).toThrow(/growthInterval 3/);
      expect(() => sc.restoreLossScale({ ...lab.train.lossScale, skipped: 9 })).toThrow(/invalid/);
      sc.restoreLossScale({ ...lab.train.lossScale, scale: 2 ** 5, growthTracker: 1 });
      expect(await sc.lossScaleState()).toMatchObject({ scale: 2 ** 5, invScale: 2 ** -5, growthTracker: 1, skipped: 1 });

      // Back to 2^11: the next applied step is Adam's 4th (t = step + 1 − skipped), as the unscaled run's
      // 4th update on the same batch.
      sc.restoreLossScale({ ...lab.train.lossScale, scale: 2 ** 11, growthTracker: 0 });
      const m4 = await sc.trainStep();
      await ref.computeGradients(sc.batchAt(4));
      const r4 = await ref.applyGradients();
      expect(m4.grad_norm).toBe(r4.gradNorm);
      expect(m4).toMatchObject({ loss_scale: 2 ** 11, skipped_steps: 1 });
      await same('step 4 after the skip');
    } finally {
      ref.destroy();
      sc.destroy();
    }
  }, 600_000);
});
