/**
 * A run under the `f16` preset on the test device: SwiftShader has no shader-f16, so the trainer's
 * plan resolves every f16 GEMM to fp32, loss scaling off, and the paths the run reports (run.json's
 * gemm_paths, the run view) say fp32 and why, before and after a step.
 */
import { describe, expect, it } from 'vitest';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
const tok = CharTokenizer.fromText(text);

describe('an f16 run on a device without shader-f16', () => {
  it('runs fp32 GEMMs and says so', async () => {
    const rt = await testRuntime();
    if (rt.gpu.features.shaderF16) return; // the lent GPU's device tests cover the f16 paths
    const opts = defaultTrainOptions('micro', { steps: 1, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize }, scheme: SCHEME_PRESETS.f16 });
    const t = await Trainer.create(rt, opts, text, { tokenizer: tok });
    try {
      expect(t.plan.f16?.resolution).toEqual({ path: 'fp32', why: expect.stringMatching(/this device has no shader-f16/) });
      expect(t.plan.lossScaling).toBe(false);
      const paths = t.computePaths();
      expect(paths).toHaveLength(2);
      for (const p of paths) {
        expect(p).toMatchObject({ forward: 'fp32', dx: 'fp32', dw: 'fp32', attention: 'fp32', attentionDp: 'fp32' });
        expect(p.f16).toMatch(/^forward, dx, dw f16 → fp32 \(this device has no shader-f16.*; attention f16 → fp32 attention/);
      }
    } finally {
      t.destroy();
    }
  }, 600_000); // building a trainer's pipelines on SwiftShader under the shared cores' load took 217 s once
});
