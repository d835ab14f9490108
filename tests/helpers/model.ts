/**
 * Test support: a model built the way the engine builds one, from a plan resolved once
 * (engine/plan/run-plan.ts) — the tests' shorthand for `new LlamaGpu(rt, resolvePlan(...))`.
 */
import type { Runtime } from '../../src/engine/gpu/runtime';
import type { ModelConfig } from '../../src/engine/model/config';
import { LlamaGpu } from '../../src/engine/model/llama';
import type { ModelBuildOptions, PlanOptions } from '../../src/engine/model/plan';
import { resolvePlan } from '../../src/engine/plan/run-plan';

export function buildModel(rt: Runtime, cfg: ModelConfig, B: number, T: number, opts: Omit<PlanOptions, 'ownWeights'> & ModelBuildOptions = {}): LlamaGpu {
  const { sharedWeights, attnDqPath, ...plan } = opts;
  return new LlamaGpu(rt, resolvePlan(cfg, B, T, { ...plan, ownWeights: !sharedWeights }), { sharedWeights, attnDqPath });
}
