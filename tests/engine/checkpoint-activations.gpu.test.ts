/**
 * Activation checkpointing (RunPlan.checkpoint): the backward re-runs each layer's forward from its
 * saved input with the same kernels in the same order, so a checkpointed run must reproduce the
 * plain run bit for bit — losses, gradients, weights after AdamW — for full training under f16
 * compute (the f32 twin) and LoRA with dropout (masks regenerated from the step's seeds); its plan must
 * drop exactly the (L − 1) layers' saved tensors other than the input, with the ledger equal to it.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { roundBufferSize } from '../../src/engine/gpu/memory';
import { defaultLoraSpec } from '../../src/engine/lora/spec';
import { LAYER_SAVED, layerSizes, modelDims } from '../../src/engine/model/plan';
import { resolveTrainingPlan, type TrainingPlan } from '../../src/engine/plan/train-plan';
import { defaultTrainOptions, type TrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';
import { F16_COMPUTE_FP32_SAVED } from '../helpers/schemes';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 20_000);
const tok = CharTokenizer.fromText(text);

function options(o: Partial<TrainOptions> = {}): TrainOptions {
  // Three layers: the backward re-runs two of them (the last layer's set is still there from the forward).
  const base = defaultTrainOptions('micro', { steps: 4, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize, num_hidden_layers: 3 } });
  return { ...base, ...o };
}

/** Bytes the checkpointed plan saves fewer: every layer but one keeps only its input (xIn). */
function expectedDrop(o: TrainOptions): number {
  const d = modelDims(o.model, o.batch, o.seq);
  const sizes = layerSizes(d);
  const perLayer = LAYER_SAVED.filter((k) => k !== 'xIn').reduce((s, k) => s + roundBufferSize(sizes[k][0] * 4), 0);
  return (d.L - 1) * perLayer;
}

/** Two steps of `o` with and without checkpointing: losses, then the trainable weights and last gradients. */
async function compare(o: TrainOptions, plan?: (o: TrainOptions) => TrainingPlan<TrainOptions>): Promise<void> {
  const rt = await testRuntime();
  const ck = { ...o, checkpointActivations: true };
  const a = await Trainer.create(rt, o, text, { tokenizer: tok, ...(plan ? { plan: plan(o) } : {}) });
  const b = await Trainer.create(rt, ck, text, { tokenizer: tok, ...(plan ? { plan: plan(ck) } : {}) });
  try {
    expect(a.plan.model.checkpoint).toBe(false);
    expect(b.plan.model.checkpoint).toBe(true);
    expect(a.plan.memory.activations - b.plan.memory.activations).toBe(expectedDrop(o));
    expect(b.memory()).toEqual(expect.objectContaining({ total: b.plan.memory.total, activations: b.plan.memory.activations }));
    for (let s = 0; s < 2; s++) {
      const [la, lb] = [(await a.trainStep()).loss, (await b.trainStep()).loss];
      expect(lb, `step ${s}`).toBe(la);
    }
    expect(await b.model.readTrainable('grads')).toEqual(await a.model.readTrainable('grads'));
    expect(await b.model.readTrainable('weights')).toEqual(await a.model.readTrainable('weights'));
  } finally {
    a.destroy();
    b.destroy();
  }
}

describe('activation checkpointing', () => {
  it('LoRA with dropout: the re-run forward regenerates the masks from the step\'s seeds (bit for bit)', async () => {
    await compare(options({ lora: defaultLoraSpec(4, { dropout: 0.1 }) }));
  });

  // Full training under f16 compute covers the fp32 path's dispatches too (norms, RoPE, attention, SwiGLU) plus the f16 casts; two cases keep the file cheap.
  it('full training, f16 compute (the f32 twin on SwiftShader), loss-scaled: the same losses, gradients and weights bit for bit; the plan drops the recomputed activations and the ledger agrees', async () => {
    // fp32 saved cells: the f16 preset's 16-bit cells do not apply to the recomputed tensors (run-plan.ts checkpointStorage), so its plain run would differ.
    await compare(options({ scheme: F16_COMPUTE_FP32_SAVED }), (o) => resolveTrainingPlan(o, { device: { shaderF16: true, tensorCores: false }, f16Twin: true, lossScale: { initScale: 2 ** 10 } }));
  });
});
