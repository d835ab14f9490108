/**
 * The model, data and variants the LoRA benches share (issue 39): SmolLM2-135M's shape (30 layers,
 * d 576, 9/3 heads, F 1,536, vocabulary 49,152, tied) or 360M's, `shrink` the same family at a size
 * SwiftShader runs; random tokens (a step's cost does not depend on the text); a variant name
 * (full, lora, qlora-int4 …, `+ckpt`) and the trainer it builds.
 */
import type { Runtime } from '../src/engine/gpu/runtime';
import { loraBuffers, type LoraPlan } from '../src/engine/lora/plan';
import { defaultQloraSpec, QLORA_FORMATS, type QloraFormat } from '../src/engine/lora/qlora/plan';
import { defaultLoraSpec } from '../src/engine/lora/spec';
import { type ModelConfig, validateModelConfig } from '../src/engine/model/config';
import { initParams, paramLayout, unflatten } from '../src/engine/model/params';
import { memoryOf, resolveTrainingPlan, type TrainingPlan } from '../src/engine/plan/train-plan';
import type { BatchSource } from '../src/engine/train/data/data';
import type { TrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { f16DeviceFeatures, Trainer } from '../src/engine/train/trainer';
import { Rng } from '../src/engine/util/rng';

export function loraBenchModel(o: { shape?: string; shrink?: boolean; layers?: number } = {}): ModelConfig {
  if (o.shape !== undefined && !['135m', '360m'].includes(o.shape)) throw new Error(`--shape expects 135m or 360m, got ${o.shape}`);
  const m360 = o.shape === '360m';
  return validateModelConfig({
    vocab_size: o.shrink ? 512 : 49152, hidden_size: o.shrink ? 72 : m360 ? 960 : 576, intermediate_size: o.shrink ? 192 : m360 ? 2560 : 1536,
    num_hidden_layers: o.layers ?? (m360 ? 32 : 30), num_attention_heads: m360 ? 15 : 9, num_key_value_heads: m360 ? 5 : 3,
    max_position_embeddings: 2048, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, initializer_range: 0.041666666666666664,
  });
}

/** Random tokens below V. */
export function randomBatches(V: number): BatchSource {
  const draw = (seed: number, B: number, T: number) => {
    const rng = new Rng(seed);
    return Int32Array.from({ length: B * (T + 1) }, () => rng.int(V));
  };
  return { batch: (step, B, T) => draw(step + 1, B, T), valBatches: (count, B, T) => Array.from({ length: count }, (_, i) => draw(1_000_000 + i, B, T)) };
}

/**
 * A bench row's variant: `full`, `lora` (r16, all 7 linears) or `qlora-<format>`, then any of
 * `/recompute-u` (the backward recomputes uᵀ: LoraPlan.saveU false), `/one-pass` (uᵀ, vᵀ never
 * split over K: LoraPlan.splitThin false) — `lora/recompute-u/one-pass` is the step before both —
 * `/no-epilogue` (the adapters' terms as GEMMs of their own: LoraPlan.epilogue false),
 * `/f16-epilogue` (every f16 base GEMM takes the terms in its epilogue, pinned: LoraPlan.f16Epilogue;
 * by default only those that multiply them on the tensor cores), `/f16-epilogue-fwd` (the forward's only,
 * dX's terms as GEMMs of their own) or `/no-f16-epilogue` (none: the default before the tensor-core term), `/each-reduce` (every split thin GEMM its own reduce: LoraPlan.batchReduce false, the step
 * before a layer's dA/dB partials were summed by one reduce), and `+ckpt` (activation checkpointing) last.
 */
export interface LoraVariant {
  name: string;
  kind: 'full' | 'lora' | `qlora-${QloraFormat}`;
  ckpt: boolean;
  saveU: boolean;
  splitThin: boolean;
  epilogue: boolean;
  /** undefined: the plan's default. */
  f16Epilogue?: readonly ('forward' | 'dx')[];
  batchReduce: boolean;
}

export function parseLoraVariant(name: string): LoraVariant {
  const ckpt = name.endsWith('+ckpt');
  const [kind, ...mods] = name.replace(/\+ckpt$/, '').split('/');
  const kinds = ['full', 'lora', ...QLORA_FORMATS.map((f) => `qlora-${f}`)];
  const known = ['recompute-u', 'one-pass', 'no-epilogue', 'f16-epilogue', 'f16-epilogue-fwd', 'no-f16-epilogue', 'each-reduce'];
  if (!kinds.includes(kind)) throw new Error(`variant ${name}: unknown ${kind} (one of ${kinds.join(', ')}; then ${known.map((m) => `/${m}`).join(', ')}, +ckpt)`);
  const bad = mods.filter((m) => !known.includes(m));
  if (bad.length || (kind === 'full' && mods.length)) throw new Error(`variant ${name}: ${bad.length ? `unknown modifier ${bad.join(', ')}` : 'full fine-tuning has no adapters to modify'} (LoRA's: ${known.map((m) => `/${m}`).join(', ')})`);
  const f16 = mods.filter((m) => m.includes('f16-epilogue'));
  if (f16.length > 1 || (f16.length && mods.includes('no-epilogue'))) throw new Error(`variant ${name}: ${[...f16, ...mods.filter((m) => m === 'no-epilogue')].map((m) => `/${m}`).join(' and ')} contradict each other`);
  return {
    name, kind: kind as LoraVariant['kind'], ckpt, saveU: !mods.includes('recompute-u'), splitThin: !mods.includes('one-pass'),
    epilogue: !mods.includes('no-epilogue'), f16Epilogue: mods.includes('f16-epilogue') ? ['forward', 'dx'] : mods.includes('f16-epilogue-fwd') ? ['forward'] : mods.includes('no-f16-epilogue') ? [] : undefined,
    batchReduce: !mods.includes('each-reduce'),
  };
}

/** `plan` with LoraPlan's switches set, its buffers and memory priced again (lora.* buffers only change). */
function withLoraSwitches(plan: TrainingPlan, o: Pick<LoraPlan, 'saveU' | 'splitThin' | 'epilogue' | 'f16Epilogue' | 'batchReduce'>): TrainingPlan {
  const lora = { ...plan.model.lora!, ...o };
  const swap = (bs: TrainingPlan['buffers']) => [...bs.filter((b) => !b.key.startsWith('lora.')), ...loraBuffers(lora, plan.model.dims, plan.model.training)];
  const buffers = swap(plan.buffers);
  return { ...plan, model: { ...plan.model, lora, buffers: swap(plan.model.buffers) }, buffers, memory: memoryOf(buffers) };
}

const initialized = new WeakMap<ModelConfig, Map<string, Float32Array>>();
/** Seed-1 weights of `model`, made once per config (135M floats take seconds). */
function paramsOf(model: ModelConfig): Map<string, Float32Array> {
  const p = initialized.get(model) ?? unflatten(initParams(model, paramLayout(model), 1), paramLayout(model));
  initialized.set(model, p);
  return p;
}

/** A trainer of `model` (seed-1 weights, random tokens) for a variant under `base`'s options (batch, seq, scheme). */
export async function loraVariantTrainer(rt: Runtime, model: ModelConfig, base: TrainOptions, v: LoraVariant): Promise<Trainer> {
  const opts: TrainOptions = {
    ...base, model,
    ...(v.kind === 'full' ? {} : { lora: defaultLoraSpec(16) }),
    ...(v.kind.startsWith('qlora-') ? { qlora: defaultQloraSpec(v.kind.slice(6) as QloraFormat) } : {}),
    ...(v.ckpt ? { checkpointActivations: true } : {}),
  };
  const params = paramsOf(model);
  const init = { tokenizer: CharTokenizer.fromText('abcdefgh'), params, data: randomBatches(model.vocab_size) };
  if (v.saveU && v.splitThin && v.epilogue && !v.f16Epilogue && v.batchReduce) return Trainer.create(rt, opts, '', init);
  const o = { saveU: v.saveU, splitThin: v.splitThin, epilogue: v.epilogue, f16Epilogue: v.f16Epilogue, batchReduce: v.batchReduce };
  const plan = withLoraSwitches(resolveTrainingPlan(opts, { device: await f16DeviceFeatures(rt, { probe: true }) }), o);
  return Trainer.create(rt, opts, '', { ...init, plan });
}
