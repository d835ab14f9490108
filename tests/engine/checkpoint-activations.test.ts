/**
 * Activation checkpointing in the plan (no GPU): which buffers a checkpointed step keeps (each
 * layer's input, one shared set of the rest), the bytes it saves — the same for full training, LoRA
 * and QLoRA — the schemes it refuses in words, and the run spec carrying the option to the plan.
 */
import { describe, expect, it } from 'vitest';
import { roundBufferSize } from '../../src/engine/gpu/memory';
import { defaultLoraSpec } from '../../src/engine/lora/spec';
import { defaultQloraSpec } from '../../src/engine/lora/qlora/plan';
import { PRESETS, validateModelConfig } from '../../src/engine/model/config';
import { LAYER_SAVED, layerSizes, modelDims, SAVED_KIND_OF } from '../../src/engine/model/plan';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { defaultRunSpec, trainOptionsOf } from '../../src/engine/run/spec';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions, type TrainOptions } from '../../src/engine/train/options';
import { bitsAndWire } from '../../src/engine/train/probe-bits';

// SmolLM2-135M's shape (bench/lora-device.ts), priced at the B8×T512.
const smol = validateModelConfig({
  vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30, num_attention_heads: 9, num_key_value_heads: 3,
  max_position_embeddings: 2048, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, initializer_range: 0.041666666666666664,
});
const smolOpts = (o: Partial<TrainOptions> = {}): TrainOptions => ({ ...defaultTrainOptions('base', { batch: 8, seq: 512 }), model: smol, ...o });

describe('activation checkpointing: the plan', () => {
  it('keeps every layer\'s input and one shared set of the rest: the activations drop by (L − 1) layers\' other saved tensors, for full, LoRA and QLoRA alike', () => {
    const d = modelDims(smol, 8, 512);
    const sizes = layerSizes(d);
    const drop = (d.L - 1) * LAYER_SAVED.filter((k) => k !== 'xIn').reduce((s, k) => s + roundBufferSize(sizes[k][0] * 4), 0);
    const lora = defaultLoraSpec(16);
    for (const o of [{}, { lora }, { lora, qlora: defaultQloraSpec('int4') }]) {
      const plain = resolveTrainingPlan(smolOpts(o));
      const ck = resolveTrainingPlan(smolOpts({ ...o, checkpointActivations: true }));
      expect(plain.memory.activations - ck.memory.activations).toBe(drop);
      expect(ck.memory.total).toBe(plain.memory.total - drop);
      const keys = new Set(ck.model.buffers.map((b) => b.key));
      for (let l = 0; l < d.L; l++) expect(keys.has(`L${l}.xIn`)).toBe(true);
      expect(keys.has('ckpt.h1')).toBe(true);
      expect(keys.has('L0.h1') || keys.has('L1.gate')).toBe(false);
      expect(ck.model.buffers.filter((b) => b.key === 'ckpt.gate')).toHaveLength(1);
      // The bit accounting's saved bytes (activations only: rstd and lse are statistics) drop alike; fp32 stays 32 bits.
      const savedBytes = (p: typeof plain) => bitsAndWire(p.model).saved.perLayer.reduce((s, r) => s + r.bytes, 0);
      const kinded = LAYER_SAVED.filter((k) => k !== 'xIn' && SAVED_KIND_OF[k]).reduce((s, k) => s + sizes[k][0] * 4, 0);
      expect(savedBytes(plain) - savedBytes(ck)).toBe((d.L - 1) * kinded);
      expect(bitsAndWire(ck.model).saved.overall).toBe(32);
    }
  });

  it('a forward-only model has nothing to recompute', () => {
    expect(resolvePlan(PRESETS.micro, 2, 16, { training: false, checkpointActivations: true }).checkpoint).toBe(false);
  });

  const refusals: [string, RegExp][] = [
    ['agoq', /activation checkpointing: scheme 'agoq' stores layer 0's saved activations .*quantized.*use fp32 saved cells/],
    ['int8', /activation checkpointing: scheme 'int8' runs layer 0's GEMMs in INT8.*use fp32 or f16 compute/],
    ['a8', /activation checkpointing: scheme 'a8' fake-quantizes layer 0's GEMM inputs/],
    ['taco-tp2', /activation checkpointing: scheme 'taco-tp2' splits the model over 2 peers \(tensor parallelism\)/],
  ];
  it.each(refusals)('refuses scheme %s in words', (name, want) => {
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS[name], checkpointActivations: true })).toThrow(want);
  });

  it('runs under f16 compute and the study\'s fake-quantized weights and output gradients (outside the re-run forward, or read-only there)', () => {
    for (const name of ['f16', 'w8', 'g8']) expect(resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS[name], checkpointActivations: true }).checkpoint).toBe(true);
  });

  it('the run spec carries it to the training options', () => {
    const spec = defaultRunSpec('micro', { checkpointActivations: true });
    expect(spec.checkpointActivations).toBe(true);
    expect(trainOptionsOf(spec).checkpointActivations).toBe(true);
    expect(trainOptionsOf(defaultRunSpec('micro')).checkpointActivations).toBeUndefined();
  });
});
