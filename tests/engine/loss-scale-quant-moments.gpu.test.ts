/**
 * Loss scaling with the study's fake-quantized Adam moments (scheme adam.m / adam.v not fp32): a step
 * the scaler skips must leave m and v bit for bit as they were, as torch's GradScaler never calls
 * optimizer.step() on a skipped step. buildOptimizer (engine/model/llama.ts) runs m ← Q(m), v ← Q(v)
 * before AdamW, and AdamW's update leaves m, v off the quantization grid, so unguarded a skipped
 * step would move them to Q(m), Q(v): the fake-quant passes take the scaler's state (qdq skipIf) and
 * store nothing when found_inf is set.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { packLossScaleState } from '../../src/engine/optim/loss-scale-gpu';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { type FlatTrainingState, Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
const tok = CharTokenizer.fromText(text);
// Both moments fake-quantized: m int8 per row (preset m8's), v int8 per row (preset v8's).
const scheme = { ...SCHEME_PRESETS.m8, name: 'm8v8', adam: { m: SCHEME_PRESETS.m8.adam.m, v: SCHEME_PRESETS.v8.adam.v } };
const opts = defaultTrainOptions('micro', {
  steps: 20, batch: 2, seq: 16, lr: 1e-2, minLr: 1e-2, warmup: 0, model: { vocab_size: tok.vocabSize, num_hidden_layers: 1 },
});
opts.scheme = scheme;
const lossScale = { always: true, initScale: 2 ** 10, growthInterval: 2000 };

const bits = (a: Float32Array) => new Uint32Array(a.buffer, a.byteOffset, a.length);
const differing = (a: Float32Array, b: Float32Array) => a.reduce((n, x, i) => n + (Object.is(x, b[i]) ? 0 : 1), 0);

describe('loss scaling with fake-quantized Adam moments', () => {
  let before: FlatTrainingState;
  let after: FlatTrainingState;
  let skipped = -1;
  beforeAll(async () => {
    const rt = await testRuntime();
    const plan = resolveTrainingPlan({ ...opts, model: { ...opts.model, vocab_size: tok.vocabSize } }, { lossScale });
    expect(plan.lossScaling).toBe(true);
    const t = await Trainer.create(rt, opts, text, { tokenizer: tok, plan });
    try {
      // Two applied steps: m, v are nonzero and, being AdamW's full-precision update of Q(m), Q(v), off the grid.
      for (let s = 0; s < 2; s++) expect((await t.trainStep()).skipped_steps).toBe(0);
      // A scale that overflows the gradients' norm: the step is skipped.
      rt.write(t.model.b('lossScale'), new Uint8Array(packLossScaleState({ ...plan.model.lossScale!, scale: 2 ** 120, growthTracker: 0 })));
      before = await t.trainingState();
      skipped = (await t.trainStep()).skipped_steps ?? -1;
      after = await t.trainingState();
    } finally {
      t.destroy();
    }
  }, 600_000);

  // The setup's own checks, apart from the moments'.
  it('the overflowing step is skipped and leaves the weights alone', () => {
    expect(skipped).toBe(1);
    expect(bits(after.weights)).toEqual(bits(before.weights));
  });

  it('a skipped step leaves the quantized moments m, v bit-identical', () => {
    // How many moments moved first (a short failure message), then bit for bit.
    expect({ m: differing(after.m, before.m), v: differing(after.v, before.v) }).toEqual({ m: 0, v: 0 });
    expect(bits(after.m)).toEqual(bits(before.m));
    expect(bits(after.v)).toEqual(bits(before.v));
  });
});
