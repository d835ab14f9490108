/**
 * The typed message protocol between the page and a training worker (one worker hosts one run, so
 * several runs can train side by side, each with its own device). Messages into the worker are
 * validated with zod, because a worker is a trust boundary of sorts: a malformed `start` must come
 * back as an `error` message, not as a silent dead worker.
 *
 *   page → worker: start (fresh, or from a checkpoint) | pause | resume | stop
 *   worker → page: status → ready → (metrics | val | quant | sample | checkpoint | paused | resumed)* → done,
 *                  or error at any point
 */
import { z } from 'zod';
import type { MemReport } from '../engine/gpu/memory';
import { ModelConfigSchema, PRESET_NAMES, PRESETS } from '../engine/model/config';
import { modelDims } from '../engine/model/plan';
import { computeProblem } from '../engine/plan/run-plan';
import { resolveTrainingPlan } from '../engine/plan/train-plan';
import { tpActive, tpProblem } from '../engine/model/tp/tp';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { type Scheme, SchemeSchema, unsupportedFeatures } from '../engine/scheme/scheme';
import { BUNDLED_DATASET, DEFAULT_CHECKPOINT_EVERY, defaultRunSpec, type RunSpec, schemaProblems, trainOptionsOf } from '../engine/run/spec';
import type { TrainOptions } from '../engine/train/options';
import { LAB_RUN_SHAPE } from '../engine/tune/lab-run';
import { LORA_TARGETS, loraAdapters, type LoraSpec, LoraSpecSchema } from '../engine/lora/spec';
import { QloraSpecSchema } from '../engine/lora/qlora/plan';
import type { QuantErrorRecord } from '../engine/train/probe';
import type { BitsAndWire } from '../engine/train/probe-bits';

export { BUNDLED_DATASET };

const Splits = z.object({ train: z.number().int().min(0), val: z.number().int().min(0) });

export const TokenizerSettingSchema = z.object({
  kind: z.enum(['char', 'bpe', 'hf']),
  vocabSize: z.number().int().min(2).max(1 << 20),
  /** What the user chose: char, bpe:N, or the tokenizer file's name. */
  source: z.string().min(1).max(200),
});

export const PreparedDataSchema = z.object({
  /** The token cache's key (data, text field, tokenizer). */
  key: z.string().regex(/^[0-9a-f]{64}$/),
  files: z.array(z.object({ name: z.string(), bytes: z.number().int().min(0) })).min(1),
  field: z.string(),
  tokens: Splits,
  bytes: Splits,
  documents: Splits,
});

export const RunConfigSchema = z
  .object({
    preset: z.enum(PRESET_NAMES),
    /** A custom model (Hugging Face keys) replacing the preset's shape; the preset still gives the recipe. */
    model: ModelConfigSchema.optional(),
    /** The bundled corpus, or the name of a text file the page read (its text travels beside the config). */
    dataset: z.string().min(1).max(200).default(BUNDLED_DATASET),
    steps: z.number().int().min(1).max(10_000_000),
    batch: z.number().int().min(1).max(4096),
    /** Context length (tokens per sequence); the model's positions grow to fit (RoPE has no table). */
    seq: z.number().int().min(2).max(8192),
    /** Peak learning rate; absent = the preset's default. */
    lr: z.number().positive().max(1).optional(),
    seed: z.number().int().min(0).max(0xffffffff),
    /** Evaluate validation loss every N steps and after the last one (0 = never). */
    evalEvery: z.number().int().min(0),
    /** Validation batches averaged per evaluation. */
    evalBatches: z.number().int().min(1).max(1000),
    /** Generate a sample every N steps (0 = only at the end). */
    sampleEvery: z.number().int().min(0),
    /** Characters generated per sample (0 = no samples). */
    sampleLength: z.number().int().min(0).max(4000),
    /** Post a checkpoint every N steps; at least 1, so a tab closed mid-run leaves one to resume from (absent = the run spec's default). */
    checkpointEvery: z.number().int().min(1).optional(),
    /** Quantization scheme (absent = fp32). */
    scheme: SchemeSchema.optional(),
    /** The tokenizer (absent = the characters of the bundled text); its vocabulary sizes the embedding and logits. */
    tokenizer: TokenizerSettingSchema.optional(),
    /** Data prepared in the page's token cache (absent = the bundled text, or the picked text travelling beside). */
    data: PreparedDataSchema.optional(),
    /** A checkpoint the run starts from (its files travel beside the config, as `init` of start). */
    init: z.object({ name: z.string().min(1).max(200), params: z.number().int().min(1) }).optional(),
    /** Fine-tune LoRA adapters over the frozen model (absent: every parameter trains); the run spec's lora. */
    lora: LoraSpecSchema.optional(),
    /** QLoRA: the frozen base's block linears stored INT4/INT8 (used only with lora); the run spec's qlora. */
    qlora: QloraSpecSchema.optional(),
    /** Activation checkpointing: each layer keeps only its input and its forward runs again in the backward; the run spec's checkpointActivations. */
    checkpointActivations: z.boolean().optional(),
  })
  .strict();

export type RunConfig = z.infer<typeof RunConfigSchema>;

export const DEFAULT_RUN_CONFIG: RunConfig = {
  preset: 'micro',
  dataset: BUNDLED_DATASET,
  steps: 200,
  // The shapes "Tune this GPU" tunes by default (engine/tune).
  batch: LAB_RUN_SHAPE.batch,
  seq: LAB_RUN_SHAPE.seq,
  seed: 1337,
  evalEvery: 50,
  evalBatches: 8,
  sampleEvery: 0,
  sampleLength: 200,
  checkpointEvery: DEFAULT_CHECKPOINT_EVERY,
};

/**
 * The page's form as a run spec (engine/run/spec.ts): the one place a page run's settings become
 * the spec the worker trains and the memory plan reads. Throws the spec's validation error.
 */
export function runSpecOfConfig(c: RunConfig): RunSpec {
  // The tokenizer's vocabulary sizes the model, except an imported model's (it may pad its embedding).
  const vocab = c.tokenizer && !c.init ? { vocab_size: c.tokenizer.vocabSize } : {};
  const base = c.model ?? (c.tokenizer ? PRESETS[c.preset] : undefined);
  const model = base ? { ...base, ...vocab, max_position_embeddings: Math.max(base.max_position_embeddings, c.seq) } : undefined;
  return defaultRunSpec(c.preset, {
    steps: c.steps,
    batch: c.batch,
    seq: c.seq,
    lr: c.lr,
    seed: c.seed,
    model,
    scheme: c.scheme,
    data: { source: c.dataset, ...(c.data?.field ? { textField: c.data.field } : {}), ...(c.data ? { prepared: c.data.key } : {}) },
    ...(c.tokenizer ? { tokenizer: { kind: c.tokenizer.kind, source: c.tokenizer.source, vocabSize: c.tokenizer.vocabSize } } : {}),
    cadence: { evalEvery: c.evalEvery, evalBatches: c.evalBatches, sampleEvery: c.sampleEvery, sampleLength: c.sampleLength, checkpointEvery: c.checkpointEvery },
    ...(c.lora ? { lora: c.lora } : {}),
    // A quantized base only under adapters (the form keeps the choice while LoRA is off).
    ...(c.lora && c.qlora ? { qlora: c.qlora } : {}),
    ...(c.checkpointActivations ? { checkpointActivations: true } : {}),
  });
}

/** The engine's training options for a run config (pure: no GPU; used by the worker and the memory plan). */
export function trainOptionsFor(c: RunConfig): TrainOptions {
  return trainOptionsOf(runSpecOfConfig(c));
}

/** Checkpoint files as they travel (structured clone) and are stored: bytes or JSON text. */
const FilesSchema = z.record(z.string(), z.union([z.instanceof(Uint8Array), z.string()]));
export type CheckpointBlob = z.infer<typeof FilesSchema>;

export const ToWorkerSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('start'),
    runId: z.string().min(1),
    config: RunConfigSchema,
    corpusUrl: z.string().min(1).optional(),
    /** The training text itself (a file the user picked); wins over corpusUrl. */
    text: z.string().min(1).optional(),
    /** A checkpoint's files to start from (config.init): its weights and tokenizer, step 0. */
    init: z.array(z.instanceof(Blob)).min(1).optional(),
    /** Continue from a checkpoint (params, optimizer moments, tokenizer, step); elapsed training time so far. */
    resume: z.object({ files: FilesSchema, elapsed_s: z.number().min(0) }).optional(),
  }),
  z.object({ type: z.literal('stop'), runId: z.string().min(1) }),
  z.object({ type: z.literal('pause'), runId: z.string().min(1) }),
  z.object({ type: z.literal('resume'), runId: z.string().min(1) }),
]);
export type ToWorker = z.infer<typeof ToWorkerSchema>;

/** One training step as the worker reports it (the trainer's StepMetrics, plain data). */
export interface StepReport {
  step: number;
  loss: number;
  lr: number;
  grad_norm: number;
  tokens_per_s: number;
  mem: MemReport;
  /** Training time of the run so far (pauses excluded, continued across resumes). */
  elapsed_s: number;
  /** Loss scaling (f16 runs): the scale after this step, and the steps skipped so far for inf/NaN gradients. */
  loss_scale?: number;
  skipped_steps?: number;
}

export interface RunInfo {
  adapter: string;
  params: number;
  vocabSize: number;
  memory: MemReport;
  /** Bits per element and wire bytes of the run as built (exact counts from scheme and dims; absent in runs saved before it existed). */
  accounting?: BitsAndWire;
  /** The kernels the linear layers' GEMMs run on this device, in words (gemmPathSummary; absent in older runs). */
  gemmPaths?: string;
  /** Where the kernel choices came from: tuned on this GPU (the bench page's "Tune this GPU"), partly, or defaults (engine/tune). */
  tuning?: { status: 'tuned' | 'partly tuned' | 'defaults'; label: string };
}

/** webgpu: no API/adapter; gpu: a validation error from the device; oom: out of GPU memory. */
export type ErrorKind = 'webgpu' | 'gpu' | 'oom' | 'device-lost' | 'config' | 'error';

export type FromWorker =
  | { type: 'status'; runId: string; phase: string }
  | { type: 'ready'; runId: string; info: RunInfo; startStep: number }
  | { type: 'metrics'; runId: string; metrics: StepReport }
  | { type: 'val'; runId: string; step: number; loss: number }
  /** Per-layer quantization error measured on an evaluation step (only for schemes that quantize in the forward). */
  | { type: 'quant'; runId: string; step: number; errors: QuantErrorRecord[] }
  | { type: 'sample'; runId: string; step: number; text: string }
  | { type: 'checkpoint'; runId: string; step: number; files: CheckpointBlob }
  | { type: 'paused'; runId: string; step: number }
  | { type: 'resumed'; runId: string }
  | { type: 'error'; runId: string; kind: ErrorKind; message: string }
  | { type: 'done'; runId: string; step: number; reason: 'completed' | 'stopped' };

/** The run form's LoRA when picked: PEFT's usual recipe, rank 16, alpha 2·rank, no dropout, every linear layer. */
export const DEFAULT_LORA: LoraSpec = { rank: 16, alpha: 32, dropout: 0, targets: [...LORA_TARGETS] };

/** Whether two LoRA settings make the same adapters (targets in any order): an imported adapter then continues. */
export function sameLoraSpec(a: LoraSpec, b: LoraSpec): boolean {
  return a.rank === b.rank && a.alpha === b.alpha && a.dropout === b.dropout && a.targets.length === b.targets.length && a.targets.every((t) => b.targets.includes(t));
}

/** A LoRA setting in a run's label: "LoRA r16 · q,k,v,o,gate,up,down" (targets in the layer's order). */
export function loraLabel(l: LoraSpec): string {
  return `LoRA r${l.rank}${l.alpha !== 2 * l.rank ? ` α${l.alpha}` : ''}${l.dropout ? ` drop ${l.dropout}` : ''} · ${LORA_TARGETS.filter((t) => l.targets.includes(t)).join(',')}`;
}

/** The LoRA settings' problems in LoRA's own words, before the schema's (whose "targets: too small" says less). */
export function loraConfigProblem(raw: unknown): string | null {
  const lora = (raw as { lora?: { targets?: unknown; rank?: unknown; alpha?: unknown; dropout?: unknown } } | null)?.lora;
  if (!lora) return null;
  if (Array.isArray(lora.targets) && lora.targets.length === 0) return `LoRA needs at least one target layer (${LORA_TARGETS.join(', ')})`;
  if (!(Number.isInteger(lora.rank) && (lora.rank as number) >= 1)) return 'the LoRA rank must be a whole number ≥ 1';
  if (!(typeof lora.alpha === 'number' && lora.alpha > 0)) return 'the LoRA alpha must be a number > 0';
  if (!(typeof lora.dropout === 'number' && lora.dropout >= 0 && lora.dropout < 1)) return 'the LoRA dropout must be in [0, 1)';
  return null;
}

/** Human-readable list of what is wrong with a config, or null when it is valid and runnable. */
export function checkRunConfig(raw: unknown): string | null {
  const lp = loraConfigProblem(raw);
  if (lp) return lp;
  const r = RunConfigSchema.safeParse(raw);
  if (!r.success) return schemaProblems(RunConfigSchema, raw, r.error, 'config').join('; ');
  const c = r.data;
  if (c.init && !c.model) return `the run starts from ${c.init.name}, but has no model config of its own (forget the import to train a preset)`;
  if (c.scheme) {
    const u = unsupportedFeatures(c.scheme);
    if (u.length) return `scheme '${c.scheme.name}' uses features the engine does not implement yet: ${u.join(', ')}`;
  }
  let opts: TrainOptions;
  try {
    opts = trainOptionsFor(c);
    // A rank larger than a targeted layer's smaller side (loraAdapters names the layer).
    if (opts.lora) loraAdapters(opts.model, opts.lora);
    // QLoRA's and activation checkpointing's own refusals (INT8 compute, quantized saved activations, a group that splits words) come from the plan, resolved as the trainer will.
    if (opts.qlora || opts.checkpointActivations) resolveTrainingPlan(opts);
  } catch (e) {
    return (e as Error).message.replace(/\n\s*/g, ' ');
  }
  const tp = tpMismatch(opts.scheme, opts);
  if (tp) return tp.message;
  // The trainer's own check of the compute formats (resolvePlan's message), before minutes of compiling.
  return computeProblem(opts.model, opts.batch, opts.seq, opts.scheme);
}

/**
 * Why a scheme's tensor-parallel split does not fit the model at this batch and context, and the
 * preset schemes with the same TP codec that do fit (null when it fits or there is no TP).
 */
export function tpMismatch(scheme: Scheme | undefined, o: Pick<TrainOptions, 'model' | 'batch' | 'seq'>): { problem: string; alternatives: string[]; message: string } | null {
  if (!tpActive(scheme)) return null;
  const fits = (s: Scheme) => tpProblem(modelDims(o.model, o.batch, o.seq), s.tp) === null;
  if (fits(scheme)) return null;
  const problem = tpProblem(modelDims(o.model, o.batch, o.seq), scheme.tp)!;
  const alternatives = Object.values(SCHEME_PRESETS).filter((s) => tpActive(s) && s.tp.codec === scheme.tp.codec && fits(s)).map((s) => s.name);
  const hint = alternatives.length ? `; use ${alternatives.join(' or ')} instead` : '; pick another TP degree or batch × context';
  return { problem, alternatives, message: `scheme '${scheme.name}' cannot split this model: ${problem}${hint}` };
}

/** Scheme presets offered by the page: read at call time, since the list grows. */
export function schemePresetNames(): string[] {
  return Object.keys(SCHEME_PRESETS);
}
