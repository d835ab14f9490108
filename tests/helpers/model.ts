/**
 * Test support: a model built the way the engine builds one, from a plan resolved once
 * (engine/plan/run-plan.ts) — the tests' shorthand for `new LlamaGpu(rt, resolvePlan(...))`.
 */
import type { Runtime } from '../../src/engine/gpu/runtime';
import type { ModelConfig } from '../../src/engine/model/config';
import { LlamaGpu } from '../../src/engine/model/llama';
import type { ModelBuildOptions, PlanOptions } from '../../src/engine/model/plan';
import { flatten } from '../../src/engine/model/params';
import { resolvePlan } from '../../src/engine/plan/run-plan';

export function buildModel(rt: Runtime, cfg: ModelConfig, B: number, T: number, opts: Omit<PlanOptions, 'ownWeights'> & ModelBuildOptions = {}): LlamaGpu {
  const { sharedWeights, attnDqPath, ...plan } = opts;
  return new LlamaGpu(rt, resolvePlan(cfg, B, T, { ...plan, ownWeights: !sharedWeights }), { sharedWeights, attnDqPath });
}

/** The logits [T, V] of a forward-only model of `cfg` with `params` over the one sequence `ids` (T tokens). */
export async function logitsOf(rt: Runtime, cfg: ModelConfig, params: Map<string, Float32Array>, ids: number[]): Promise<Float32Array> {
  const T = ids.length;
  const model = buildModel(rt, cfg, 1, T, { training: false });
  try {
    model.uploadParams(flatten(params, model.layout));
    const tokens = new Int32Array(T + 1);
    tokens.set(ids);
    model.setBatch(tokens);
    rt.run(model.forwardLogits);
    return await rt.readF32(model.b('logits'), 0, T * cfg.vocab_size);
  } finally {
    model.destroy();
  }
}
