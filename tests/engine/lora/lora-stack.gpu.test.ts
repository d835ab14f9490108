/**
 * Adapters sharing an input (q/k/v, gate/up) run their A-side GEMMs stacked (lora/gemms.ts): one
 * x̃·Aᵀ, one dA and one dX term per group. Against the same model with every adapter's GEMMs apart
 * (LoraPlan.stack false): the loss, every adapter gradient and the input gradient (the embedding's
 * dX path goes through every dX term) within float rounding, in fewer dispatches.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch } from '../../../src/engine/gpu/runtime';
import { loraGroups } from '../../../src/engine/lora/gemms';
import { defaultLoraSpec, initLoraTensors, loraAdapters } from '../../../src/engine/lora/spec';
import { PRESETS } from '../../../src/engine/model/config';
import { LlamaGpu } from '../../../src/engine/model/llama';
import { flatten, initParams, paramLayout } from '../../../src/engine/model/params';
import { resolvePlan } from '../../../src/engine/plan/run-plan';
import { Rng } from '../../../src/engine/util/rng';
import { testRuntime } from '../../helpers/gpu';

const cfg = { ...PRESETS.micro, num_hidden_layers: 1 };
const [B, T] = [2, 16];
const spec = defaultLoraSpec(4, { alpha: 8 });
const params = initParams(cfg, paramLayout(cfg), 5);
const batch = (() => {
  const rng = new Rng(21);
  return Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
})();
const adapters = (() => {
  const t = initLoraTensors(cfg, spec, 3);
  const r = new Rng(4);
  for (const a of loraAdapters(cfg, spec)) t.set(a.b, r.uniformArray(a.out * spec.rank, -0.05, 0.05));
  return t;
})();

function maxRel(a: Float32Array, b: Float32Array): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num = Math.max(num, Math.abs(a[i] - b[i]));
    den = Math.max(den, Math.abs(b[i]));
  }
  return num / den;
}

/** Forward and backward of one batch: the loss, the adapters' gradients, dX at the first layer's input, the dispatches. */
async function gradients(stack: boolean) {
  const rt = await testRuntime();
  const p = resolvePlan(cfg, B, T, { lora: spec });
  const model = new LlamaGpu(rt, { ...p, lora: { ...p.lora!, stack } });
  try {
    model.uploadParams(params);
    model.writeTrainable('weights', flatten(adapters, model.trainable.layout));
    model.setBatch(batch);
    model.setStepSeed(0);
    const steps: Dispatch[] = [...model.forward, ...model.backward];
    rt.run(steps);
    const N = B * T;
    return {
      loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
      grads: await model.readTrainable('grads'),
      dres: await rt.readF32(model.b('dres'), 0, N * cfg.hidden_size),
      dispatches: steps.length + model.optimizer.length,
      groups: model.lora!.groups.map((g) => g.adapters.map((a) => a.target).join('')),
    };
  } finally {
    model.destroy();
  }
}

describe('stacked LoRA GEMMs', () => {
  it('equal every adapter\'s own GEMMs: loss, adapter gradients and dX within float rounding, at least 12 fewer dispatches a layer', async () => {
    const one = await gradients(true);
    const apart = await gradients(false);
    console.log(`LoRA micro (1 layer, all targets, r4): ${one.dispatches} dispatches a step stacked, ${apart.dispatches} apart`);
    expect(one.groups).toEqual(['qkv', 'o', 'gateup', 'down']);
    expect(apart.groups).toEqual(['q', 'k', 'v', 'o', 'gate', 'up', 'down']);
    expect(Math.abs(one.loss - apart.loss) / apart.loss).toBeLessThan(1e-6);
    expect(maxRel(one.grads, apart.grads)).toBeLessThan(1e-5);
    expect(maxRel(one.dres, apart.dres)).toBeLessThan(1e-5);
    // Per layer: x̃·Aᵀ in the forward and again in the backward, dA (one or two dispatches) and dX: 3 adapters in 1, 2 in 1.
    expect(apart.dispatches - one.dispatches).toBeGreaterThanOrEqual(4 * 3 * cfg.num_hidden_layers);
  }, 240_000);

  it('stack nothing where they cannot: dropout (each adapter its own mask)', () => {
    const p = resolvePlan(cfg, B, T, { lora: { ...spec, dropout: 0.1 } });
    expect(loraGroups(p.lora!, p.dims).every((g) => g.adapters.length === 1)).toBe(true);
    const q = resolvePlan(cfg, B, T, { lora: spec });
    expect(loraGroups(q.lora!, q.dims).map((g) => g.adapters.length)).toEqual([3, 1, 2, 1]);
  });
});
