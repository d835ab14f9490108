/** Training options: validated, with per-preset defaults (nanoGPT-style recipes). */
import { z } from 'zod';
import { type ModelConfig, ModelConfigSchema, PRESETS, type PresetName, validateModelConfig } from '../model/config';
import { SchemeSchema } from '../scheme/scheme';
import { LoraSpecSchema } from '../lora/spec';
import { QloraSpecSchema } from '../lora/qlora/plan';

export const OptimizerConfigSchema = z
  .object({
    lr: z.number().positive().max(10),
    min_lr: z.number().min(0),
    warmup_steps: z.number().int().min(0),
    total_steps: z.number().int().min(1),
    beta1: z.number().min(0).lt(1),
    beta2: z.number().min(0).lt(1),
    eps: z.number().positive(),
    weight_decay: z.number().min(0),
    grad_clip: z.number().min(0),
  })
  .strict();
export type OptimizerConfig = z.infer<typeof OptimizerConfigSchema>;

export const TrainOptionsSchema = z
  .object({
    model: ModelConfigSchema,
    optimizer: OptimizerConfigSchema,
    batch: z.number().int().min(1).max(4096),
    seq: z.number().int().min(1),
    seed: z.number().int().min(0).max(0xffffffff),
    evalEvery: z.number().int().min(0),
    evalBatches: z.number().int().min(1),
    /** Quantization scheme (default fp32). */
    scheme: SchemeSchema.optional(),
    /** Fine-tune LoRA adapters over a frozen base (engine/lora); absent: every parameter trains. */
    lora: LoraSpecSchema.optional(),
    /** QLoRA: the frozen base's block linears stored INT4/INT8 (engine/lora/qlora); needs lora. */
    qlora: QloraSpecSchema.optional(),
    /** Activation checkpointing: recompute each layer's activations in the backward instead of saving them (RunPlan.checkpoint). */
    checkpointActivations: z.boolean().optional(),
  })
  .strict();
export type TrainOptions = z.infer<typeof TrainOptionsSchema>;

interface Recipe { batch: number; seq: number; steps: number; lr: number; min_lr: number; warmup: number; beta2: number; evalEvery: number }

const RECIPES: Record<PresetName, Recipe> = {
  micro: { batch: 4, seq: 32, steps: 100, lr: 3e-3, min_lr: 3e-4, warmup: 10, beta2: 0.99, evalEvery: 50 },
  tiny: { batch: 32, seq: 128, steps: 2000, lr: 2e-3, min_lr: 2e-4, warmup: 100, beta2: 0.99, evalEvery: 200 },
  // nanoGPT shakespeare_char's batch, context and lr (1e-3 → 1e-4, warmup 100, beta2 0.99), but
  // 600 steps: without dropout this LLaMA memorises TinyShakespeare fast (validation is best near
  // step 400 and climbs past 600; docs/training.md has the curves).
  small: { batch: 64, seq: 256, steps: 600, lr: 1e-3, min_lr: 1e-4, warmup: 100, beta2: 0.99, evalEvery: 100 },
  base: { batch: 16, seq: 512, steps: 5000, lr: 6e-4, min_lr: 6e-5, warmup: 200, beta2: 0.95, evalEvery: 250 },
};

export interface TrainOverrides {
  steps?: number; batch?: number; seq?: number; lr?: number; minLr?: number; warmup?: number;
  weightDecay?: number; gradClip?: number; seed?: number; evalEvery?: number; evalBatches?: number;
  model?: Partial<ModelConfig>;
  scheme?: TrainOptions['scheme'];
}

export function defaultTrainOptions(preset: PresetName, o: TrainOverrides = {}): TrainOptions {
  const r = RECIPES[preset];
  const seq = o.seq ?? r.seq;
  const model = validateModelConfig({
    ...PRESETS[preset],
    max_position_embeddings: Math.max(PRESETS[preset].max_position_embeddings, seq),
    ...o.model,
  });
  const steps = o.steps ?? r.steps;
  const lr = o.lr ?? r.lr;
  return validateTrainOptions({
    model,
    optimizer: {
      lr,
      min_lr: o.minLr ?? Math.min(r.min_lr, lr),
      warmup_steps: Math.min(o.warmup ?? r.warmup, steps),
      total_steps: steps,
      beta1: 0.9,
      beta2: r.beta2,
      eps: 1e-8,
      weight_decay: o.weightDecay ?? 0.1,
      grad_clip: o.gradClip ?? 1.0,
    },
    batch: o.batch ?? r.batch,
    seq,
    seed: o.seed ?? 1337,
    evalEvery: o.evalEvery ?? r.evalEvery,
    evalBatches: o.evalBatches ?? 20,
    scheme: o.scheme,
  });
}

export function validateTrainOptions(raw: unknown): TrainOptions {
  const r = TrainOptionsSchema.safeParse(raw);
  if (!r.success) {
    throw new Error('invalid training options:\n' + r.error.issues.map((i) => `  ${i.path.join('.')}: ${i.message}`).join('\n'));
  }
  const t = r.data;
  if (t.seq > t.model.max_position_embeddings) {
    throw new Error(`invalid training options: seq ${t.seq} exceeds model.max_position_embeddings ${t.model.max_position_embeddings}`);
  }
  if (t.optimizer.min_lr > t.optimizer.lr) throw new Error(`invalid training options: min_lr ${t.optimizer.min_lr} > lr ${t.optimizer.lr}`);
  return t;
}
