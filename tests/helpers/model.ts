/**
 * Test support: a model built the way the engine builds one, from a plan resolved once
 * (engine/plan/run-plan.ts) — the tests' shorthand for `new LlamaGpu(rt, resolvePlan(...))`.
 */
import type { Runtime } from '../../src/engine/gpu/runtime';
import type { F16AttnSpec } from '../../src/engine/kernels/attention/f16/code';
import { type ModelConfig, PRESETS } from '../../src/engine/model/config';
import { LlamaGpu } from '../../src/engine/model/llama';
import type { ModelBuildOptions, PlanOptions } from '../../src/engine/model/plan';
import { flatten, initParams, paramLayout } from '../../src/engine/model/params';
import { resolvePlan, type RunPlan } from '../../src/engine/plan/run-plan';
import { Rng } from '../../src/engine/util/rng';

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

/**
 * The f16 twin's micro fixture (f16-cells, f16-lean, attention-f16-ds-model): micro (head dim 8, 4 query heads on 2 KV
 * heads, 2 layers) at B2 × T16 with seeded weights and tokens, a device with f16 GEMMs and the f16 attention both ways
 * at head dim 8 (what the twin stands in for), and the emulated attention's micro spec (`load`: 'direct' is cheapest to compile).
 */
export function f16TwinMicro(paramSeed: number, tokenSeed: number, load: F16AttnSpec['load'] = 'direct') {
  const cfg = { ...PRESETS.micro };
  const [B, T] = [2, 16];
  const layout = paramLayout(cfg);
  const params = initParams(cfg, layout, paramSeed);
  const rng = new Rng(tokenSeed);
  const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
  const DEV = { shaderF16: true, tensorCores: false, attentionHeadDims: [8], attentionBackwardHeadDims: [8] };
  const SPEC: F16AttnSpec = { cfg: { M: 8, N: 4, K: 8 }, D: 8, sgCount: 2, BKV: 8, sgSize: 8, PAD: 8, load };
  return { cfg, B, T, layout, params, tokens, DEV, SPEC, F16_ATTENTION: { forward: SPEC, backward: { dq: SPEC, dkdv: SPEC }, emulate: true } };
}

/**
 * One forward + backward of `p` on f16TwinMicro's weights and tokens (`micro`): the loss, every gradient as
 * stored ('grads', or agoq-f16's 'grads.*' codes and scales, by key), the model, and its dispatch labels.
 * `between`: runs after the forward (reads of what it saved).
 */
export async function twinStep(rt: Runtime, micro: ReturnType<typeof f16TwinMicro>, p: RunPlan, between?: (m: LlamaGpu) => Promise<void>) {
  const model = new LlamaGpu(rt, p, { f16Attention: micro.F16_ATTENTION });
  model.uploadParams(micro.params);
  model.setBatch(micro.tokens);
  rt.run(model.forward);
  await between?.(model);
  rt.run(model.backward);
  const keys = [...model.buf.keys()].filter((k) => k === 'grads' || k.startsWith('grads.')).sort();
  const grads = new Float32Array((await Promise.all(keys.map((k) => rt.readF32(model.b(k))))).flatMap((a) => Array.from(a)));
  const fwd = model.forward.map((d) => d.label);
  const bwd = model.backward.map((d) => d.label);
  return { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads, model, fwd, bwd, labels: [...fwd, ...bwd] };
}
