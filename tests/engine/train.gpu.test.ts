import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { RefLlama } from '../../src/engine/model/llama.ref';
import { initParams } from '../../src/engine/model/params';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer';
import { planMemory, Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 200_000);

describe('fp32 training on the GPU', () => {
  it('matches the float64 reference step by step for 20 steps (micro) and the loss falls', async () => {
    const rt = await testRuntime();
    const tok = CharTokenizer.fromText(text);
    const opts = defaultTrainOptions('micro', { steps: 20, warmup: 3, model: { vocab_size: tok.vocabSize } });
    const trainer = await Trainer.create(rt, opts, text, { tokenizer: tok });
    const ref = new RefLlama(opts.model, trainer.model.layout, initParams(opts.model, trainer.model.layout, opts.seed));
    const losses: number[] = [];
    let worst = 0;
    for (let s = 0; s < 20; s++) {
      const refLoss = ref.lossAndGrad(trainer.batchAt(s), opts.batch, opts.seq);
      const refOpt = ref.optimizerStep(opts.optimizer);
      const m = await trainer.trainStep();
      const rel = Math.abs(m.loss - refLoss) / Math.abs(refLoss);
      worst = Math.max(worst, rel);
      expect(rel, `step ${s}: gpu ${m.loss} ref ${refLoss}`).toBeLessThanOrEqual(1e-4);
      expect(Math.abs(m.grad_norm - refOpt.gradNorm) / refOpt.gradNorm, `grad norm at step ${s}`).toBeLessThan(1e-2);
      expect(m.lr).toBeCloseTo(refOpt.lr, 12);
      losses.push(m.loss);
    }
    console.log(`micro 20 steps: worst relative loss difference GPU vs float64 reference ${worst.toExponential(2)}; loss ${losses[0].toFixed(4)} -> ${losses[19].toFixed(4)}`);
    expect(losses[19]).toBeLessThan(losses[0] - 0.3);
    const val = await trainer.evaluate();
    expect(Number.isFinite(val)).toBe(true);
    const sample = await trainer.sample('ROMEO:', 8, 0.8, 1);
    expect(sample.length).toBe(8);
    // The memory plan is what was allocated, category by category.
    expect(trainer.memory()).toEqual(planMemory(trainer.opts));
    trainer.destroy();
  });
});
