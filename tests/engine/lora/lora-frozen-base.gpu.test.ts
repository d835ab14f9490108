/**
 * A frozen base's derived copies (LoRA: the f16 weight copies, the INT8 per-step weight codes) are
 * made once per upload (LlamaGpu.baseDerive), not at the start of every forward: over 3 training
 * steps no cast or weight-code dispatch is encoded, and the losses equal bit for bit those of the
 * same model remaking its copies before every step (what the forward did before). One plan per test:
 * the second model reuses the first's pipelines (compiles dominate GPU tests on SwiftShader).
 */
import { describe, expect, it, vi } from 'vitest';
import type { Dispatch } from '../../../src/engine/gpu/runtime';
import { PRESETS } from '../../../src/engine/model/config';
import { flatten, initParams, paramLayout } from '../../../src/engine/model/params';
import { LlamaGpu } from '../../../src/engine/model/llama';
import { defaultLoraSpec, initLoraTensors, loraAdapters } from '../../../src/engine/lora/spec';
import { resolvePlan, type ResolveOptions } from '../../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { writeAdamwStep } from '../../../src/engine/train/trainer';
import { Rng } from '../../../src/engine/util/rng';
import { testRuntime } from '../../helpers/gpu';

const cfg = { ...PRESETS.micro, num_hidden_layers: 1 };
const [B, T, STEPS] = [2, 16, 3];
const spec = defaultLoraSpec(4, { alpha: 8 });
const params = initParams(cfg, paramLayout(cfg), 5);
const rng = new Rng(21);
const batches = Array.from({ length: STEPS }, () => Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size)));
const optimizer = defaultTrainOptions('micro', { steps: STEPS, warmup: 0, lr: 1e-2 }).optimizer;
const adapters = (() => {
  const t = initLoraTensors(cfg, spec, 3);
  const r = new Rng(4);
  for (const a of loraAdapters(cfg, spec)) t.set(a.b, r.uniformArray(a.out * spec.rank, -0.05, 0.05));
  return t;
})();

/** STEPS LoRA steps (`everyStep`: baseDerive before each): the losses and the labels of every dispatch encoded while they ran. */
async function train(opts: Omit<ResolveOptions, 'lora'>, everyStep = false) {
  const rt = await testRuntime();
  const model = new LlamaGpu(rt, resolvePlan(cfg, B, T, { ...opts, lora: spec }));
  const encode = vi.spyOn(rt, 'encode');
  try {
    model.uploadParams(params);
    model.writeTrainable('weights', flatten(adapters, model.trainable.layout));
    encode.mockClear();
    const losses: number[] = [];
    for (let s = 0; s < STEPS; s++) {
      model.setBatch(batches[s]);
      model.setStepSeed(s);
      writeAdamwStep(rt, model, s, optimizer);
      rt.run([...(everyStep ? model.baseDerive : []), ...model.forward, ...model.backward, ...model.optimizer]);
      losses.push((await rt.readF32(model.b('loss'), 0, 1))[0]);
    }
    const labels = encode.mock.calls.flatMap((c) => (c[1] as Dispatch[]).map((d) => d.label));
    return { losses, labels, derive: model.baseDerive.map((d) => d.label) };
  } finally {
    encode.mockRestore();
    model.destroy();
  }
}

/** Made once, the copies give the same steps as remade before each; the steps encode none of them. */
async function check(opts: Omit<ResolveOptions, 'lora'>, prefix: string, count: number) {
  const once = await train(opts);
  const each = await train(opts, true);
  expect(once.derive.filter((x) => x.startsWith(prefix))).toHaveLength(count);
  expect(once.labels.filter((x) => x.startsWith(prefix))).toEqual([]);
  expect(each.labels.filter((x) => x.startsWith(prefix))).toHaveLength(STEPS * count);
  expect(once.losses).toEqual(each.losses);
  expect(once.losses[0]).not.toBe(once.losses[STEPS - 1]); // the adapters do train
}

describe('a frozen base (LoRA) derives its copies once per upload', () => {
  it('f16 (twin): the weights\' f16 copies', async () => {
    await check({ scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true }, 'f16.w.', 7 * cfg.num_hidden_layers);
  }, 240_000);

  it('INT8 per-step weight codes', async () => {
    const scheme: Scheme = parseScheme({ ...SCHEME_PRESETS.int8, weight_codes: 'per-step' });
    // One dispatch for the rows, two for the columns (model/weight-codes.ts).
    await check({ scheme }, 'wcodes', 3);
  }, 240_000);
});
