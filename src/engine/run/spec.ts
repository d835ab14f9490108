/**
 * The run spec: what one training run is — model, data and tokenizer, scheme, optimizer, cadence
 * (evaluate, sample, checkpoint) and parallel strategy — as one schema with one validator and one
 * set of defaults. The page's form, the worker, `npm run train`, the headless peer and the group
 * panel each build a RunSpec and hand the engine trainOptionsOf(spec) and the loop cadenceOf(spec),
 * so no entry point assembles its own cadence or defaults.
 *
 * Cadence defaults (one place, defaultRunSpec): evaluate every the preset recipe's evalEvery, and
 * after the last step; checkpoint every DEFAULT_CHECKPOINT_EVERY steps and at the end; sample only
 * when a length is asked for. Entry points may override a field, never the rule that applies it.
 */
import { z } from 'zod';
import { ModelConfigSchema, PRESET_NAMES, type PresetName } from '../model/config';
import { dataParallelScheme } from '../scheme/presets';
import { parseScheme, type Scheme, SchemeSchema } from '../scheme/scheme';
import { gradWireOf, WIRE_FORMATS } from '../scheme/wire';
import type { LoopCadence } from '../train/loop';
import { LoraSpecSchema, type LoraSpec } from '../lora/spec';
import { QloraSpecSchema, type QloraSpec } from '../lora/qlora/plan';
import { defaultTrainOptions, OptimizerConfigSchema, type TrainOptions, type TrainOverrides } from '../train/options';
import { suggestKey, unknownKeys } from '../util/keys';

/** The corpus bundled with the lab (TinyShakespeare): the data of a run that names none. */
export const BUNDLED_DATASET = 'tinyshakespeare';
/** Periodic checkpoints when none is asked for (one at the end, on a pause and on an interrupt always). */
export const DEFAULT_CHECKPOINT_EVERY = 100;
/** The sampler's temperature when none is asked for. */
export const DEFAULT_SAMPLE_TEMPERATURE = 0.8;
/** The quantization group of a tensor-parallel strategy's exchange (the engine's TP presets use 128). */
export const TP_GROUP = 128;

export const DataSpecSchema = z
  .object({
    /** What the user named: the bundled corpus, file paths (the CLI) or a picked file's name (the page). */
    source: z.string().min(1).max(4000),
    /** The text field of .jsonl/.json objects and .parquet rows (absent: "text"). */
    textField: z.string().min(1).max(200).optional(),
    /** The page's token cache key of prepared data (absent: tokenized when the run starts). */
    prepared: z.string().regex(/^[0-9a-f]{64}$/).optional(),
  })
  .strict();
export type DataSpec = z.infer<typeof DataSpecSchema>;

export const TokenizerSpecSchema = z
  .object({
    kind: z.enum(['char', 'bpe', 'hf']),
    /** What the user chose: char, bpe:N, or the tokenizer file's name. */
    source: z.string().min(1).max(4000),
    /** Its vocabulary when known before the run starts (a character tokenizer's is read from the data). */
    vocabSize: z.number().int().min(2).max(1 << 20).optional(),
  })
  .strict();
export type TokenizerSpec = z.infer<typeof TokenizerSpecSchema>;

export const CadenceSpecSchema = z
  .object({
    /** Evaluate the validation loss every N steps and after the last one (0: never). */
    evalEvery: z.number().int().min(0),
    /** Validation batches averaged per evaluation. */
    evalBatches: z.number().int().min(1).max(1000),
    /** Commit a checkpoint every N steps (0: only at the end, on a pause and on an interrupt). */
    checkpointEvery: z.number().int().min(0),
    /** Generate a sample every N steps (0: not in between). */
    sampleEvery: z.number().int().min(0),
    /** Tokens (characters of a character tokenizer) per sample (0: never sample). */
    sampleLength: z.number().int().min(0).max(100_000),
    /** Also sample once at the end of a run that was not stopped. */
    sampleAtEnd: z.boolean(),
    /** What samples continue (absent: a newline where the vocabulary has one). */
    samplePrompt: z.string().max(100_000).optional(),
    temperature: z.number().positive().max(10),
  })
  .strict();
export type CadenceSpec = z.infer<typeof CadenceSpecSchema>;

/**
 * How the run is spread over devices. dp: gradients averaged every step over the wire format;
 * diloco: H local steps, then the pseudo-gradients' all-reduce and a Nesterov outer step (streaming
 * with fragments > 1); tp: a Megatron split over `size` members with its layer exchange's codec.
 */
export const StrategySchema = z.discriminatedUnion('kind', [
  z.object({ kind: z.literal('single') }).strict(),
  z.object({ kind: z.literal('dp'), wire: z.enum(['fp32', 'int8']) }).strict(),
  z
    .object({
      kind: z.literal('diloco'),
      innerSteps: z.number().int().min(1).max(100_000),
      wire: z.enum(WIRE_FORMATS as readonly ['fp32', 'int8', 'int4']),
      fragments: z.number().int().min(1).max(64).optional(),
      overlap: z.number().int().min(0).optional(),
      outerLr: z.number().positive().max(10).optional(),
      outerMomentum: z.number().min(0).lt(1).optional(),
    })
    .strict(),
  z.object({ kind: z.literal('tp'), size: z.number().int().min(2).max(8), codec: z.enum(['taco', 'fp32']) }).strict(),
]);
export type Strategy = z.infer<typeof StrategySchema>;
export type StrategyKind = Strategy['kind'];

export const RunSpecSchema = z
  .object({
    /** The recipe's preset (and the model's, unless `model` was given a custom shape). */
    preset: z.enum(PRESET_NAMES),
    model: ModelConfigSchema,
    data: DataSpecSchema,
    tokenizer: TokenizerSpecSchema,
    /** Quantization scheme (absent: fp32). */
    scheme: SchemeSchema.optional(),
    /** The optimizer; total_steps is the run's length. */
    optimizer: OptimizerConfigSchema,
    /** Rows per step (per member under dp and diloco). */
    batch: z.number().int().min(1).max(4096),
    /** Context length in tokens. */
    seq: z.number().int().min(1).max(65_536),
    seed: z.number().int().min(0).max(0xffffffff),
    cadence: CadenceSpecSchema,
    strategy: StrategySchema,
    /** Fine-tune LoRA adapters over a frozen base (absent: every parameter trains). */
    lora: LoraSpecSchema.optional(),
    /** QLoRA: the frozen base's block linears stored INT4/INT8 (needs lora). */
    qlora: QloraSpecSchema.optional(),
    /** Activation checkpointing: recompute each layer's activations in the backward (less memory, one more forward per layer). */
    checkpointActivations: z.boolean().optional(),
  })
  .strict();
export type RunSpec = z.infer<typeof RunSpecSchema>;

/** What an entry point may set; everything else comes from defaultRunSpec. */
export interface RunSpecOverrides extends Omit<TrainOverrides, 'evalEvery' | 'evalBatches'> {
  data?: DataSpec;
  tokenizer?: TokenizerSpec;
  cadence?: Partial<CadenceSpec>;
  strategy?: Strategy;
  lora?: LoraSpec;
  qlora?: QloraSpec;
  checkpointActivations?: boolean;
}

export class RunSpecError extends Error {
  constructor(readonly problems: string[]) {
    super(`invalid run spec:\n${problems.map((p) => `  ${p}`).join('\n')}`);
    this.name = 'RunSpecError';
  }
}

/** The scheme a strategy implies when the run names none: dp's wire as grads.wire, tp's degree and codec. */
export function strategyScheme(s: Strategy): Scheme | undefined {
  if (s.kind === 'dp') return dataParallelScheme(s.wire);
  // DiLoCo exchanges its own pseudo-gradients (its wire); the per-step gradient wire stays fp32.
  if (s.kind === 'diloco') return dataParallelScheme('fp32');
  if (s.kind === 'tp') return parseScheme({ name: `tp${s.size}-${s.codec}`, tp: { degree: s.size, codec: s.codec, group: TP_GROUP } });
  return undefined;
}

/** The one set of defaults: the preset's recipe (engine/train/options.ts) and the cadence rules above. */
export function defaultRunSpec(preset: PresetName, o: RunSpecOverrides = {}): RunSpec {
  const strategy = o.strategy ?? { kind: 'single' };
  const c = o.cadence ?? {};
  const opts = defaultTrainOptions(preset, { ...o, evalEvery: c.evalEvery, evalBatches: c.evalBatches, scheme: o.scheme ?? strategyScheme(strategy) });
  return validateRunSpec({
    preset,
    model: opts.model,
    data: o.data ?? { source: BUNDLED_DATASET },
    tokenizer: o.tokenizer ?? { kind: 'char', source: 'char' },
    ...(opts.scheme ? { scheme: opts.scheme } : {}),
    optimizer: opts.optimizer,
    batch: opts.batch,
    seq: opts.seq,
    seed: opts.seed,
    cadence: {
      evalEvery: opts.evalEvery,
      evalBatches: opts.evalBatches,
      checkpointEvery: c.checkpointEvery ?? DEFAULT_CHECKPOINT_EVERY,
      sampleEvery: c.sampleEvery ?? 0,
      sampleLength: c.sampleLength ?? 0,
      sampleAtEnd: c.sampleAtEnd ?? true,
      ...(c.samplePrompt !== undefined ? { samplePrompt: c.samplePrompt } : {}),
      temperature: c.temperature ?? DEFAULT_SAMPLE_TEMPERATURE,
    },
    strategy,
    ...(o.lora ? { lora: o.lora } : {}),
    ...(o.qlora ? { qlora: o.qlora } : {}),
    ...(o.checkpointActivations ? { checkpointActivations: true } : {}),
  });
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The keys an object schema accepts at `path` of `raw` (a union: the option `raw` picks by its discriminator). */
function keysAt(schema: z.ZodType, path: PropertyKey[], raw: unknown): string[] {
  let s: z.ZodType = schema;
  let v = raw;
  for (let i = 0; ; i++) {
    while (s instanceof z.ZodOptional || s instanceof z.ZodDefault || s instanceof z.ZodNullable) s = s.unwrap() as z.ZodType;
    if (s instanceof z.ZodDiscriminatedUnion) {
      const d = (s.def as { discriminator: string }).discriminator;
      const opts = s.options as z.ZodType[];
      const pick = opts.find((o) => o instanceof z.ZodObject && (o.shape[d] as z.ZodLiteral).values.has((v as Record<string, never>)?.[d]));
      if (!pick) return [];
      s = pick;
    }
    if (i === path.length) return s instanceof z.ZodObject ? Object.keys(s.shape) : [];
    const k = path[i];
    if (s instanceof z.ZodObject) s = s.shape[k as string] as z.ZodType;
    else if (s instanceof z.ZodRecord) s = s.valueType as z.ZodType;
    else if (s instanceof z.ZodArray) s = s.element as z.ZodType;
    else return [];
    if (!s) return [];
    v = isObject(v) || Array.isArray(v) ? (v as Record<PropertyKey, unknown>)[k] : undefined;
  }
}

/**
 * A schema's refusal of `raw` as one line per problem, each naming its field; an unknown key names
 * the nearest valid one ("model: unknown key 'hiden_size' (did you mean 'hidden_size'?)"). Shared by
 * the spec's validator and the forms that build a spec (the page's run and group configs). Unknown
 * keys come first: a misspelt key is usually why a required one is missing.
 */
export function schemaProblems(schema: z.ZodType, raw: unknown, error: z.ZodError, root = 'spec'): string[] {
  const issues = [...error.issues].sort((a, b) => Number(b.code === 'unrecognized_keys') - Number(a.code === 'unrecognized_keys'));
  return issues.flatMap((i) => {
    const where = i.path.map(String).join('.') || root;
    if (i.code !== 'unrecognized_keys') return [`${where}: ${i.message}`];
    const valid = keysAt(schema, i.path, raw);
    return i.keys.map((k) => `${where}: unknown key '${k}'${suggestKey(k, valid)}${valid.length ? `; expected one of ${valid.join(', ')}` : ''}`);
  });
}

/** Hugging Face config.json keys that describe nothing this lab trains differently (written by transformers, read as is). */
export const HF_HARMLESS_KEYS = [
  'architectures', 'model_type', 'torch_dtype', 'dtype', 'transformers_version', 'bos_token_id', 'eos_token_id',
  'pad_token_id', 'use_cache', 'attention_dropout', 'pretraining_tp', 'hidden_act', 'attention_bias', 'mlp_bias',
  'rope_scaling', 'head_dim', 'rope_parameters',
] as const;

/**
 * One line per key of a user's model config (config.json keys) that is neither a model key nor a
 * harmless Hugging Face one, naming the nearest valid key: the CLI's --config and the page's custom
 * model refuse "hiden_size" alike (did you mean 'hidden_size'?).
 */
export function modelConfigKeyProblems(raw: Record<string, unknown>, where: string): string[] {
  return unknownKeys(raw, [...Object.keys(ModelConfigSchema.shape), ...HF_HARMLESS_KEYS], where);
}

/** What the fields say together that the schema cannot check one by one (empty when consistent). */
function crossFieldProblems(s: RunSpec): string[] {
  const out: string[] = [];
  const { model, optimizer, strategy, scheme } = s;
  if (s.seq > model.max_position_embeddings) out.push(`seq: ${s.seq} exceeds model.max_position_embeddings ${model.max_position_embeddings}`);
  if (optimizer.min_lr > optimizer.lr) out.push(`optimizer.min_lr: ${optimizer.min_lr} > lr ${optimizer.lr}`);
  if (optimizer.warmup_steps > optimizer.total_steps) out.push(`optimizer.warmup_steps: ${optimizer.warmup_steps} exceeds total_steps ${optimizer.total_steps}`);
  if (s.tokenizer.vocabSize !== undefined && s.tokenizer.vocabSize > model.vocab_size) {
    out.push(`tokenizer.vocabSize: ${s.tokenizer.vocabSize} tokens do not fit model.vocab_size ${model.vocab_size}`);
  }
  if (strategy.kind === 'dp' && scheme) {
    const wire = gradWireOf(scheme.grads.wire);
    if (wire !== strategy.wire) out.push(`strategy.wire: ${strategy.wire}, but scheme '${scheme.name}' sends gradients as ${wire ?? 'a format no all-reduce carries'}`);
  }
  if (strategy.kind === 'tp') {
    if (!scheme || scheme.tp.degree !== strategy.size) out.push(`strategy.size: ${strategy.size} members, but the scheme's tp.degree is ${scheme?.tp.degree ?? 1}`);
    else if (scheme.tp.codec !== strategy.codec) out.push(`strategy.codec: ${strategy.codec}, but the scheme's tp.codec is ${scheme.tp.codec}`);
  } else if (strategy.kind !== 'single' && scheme && scheme.tp.degree > 1) {
    out.push(`strategy.kind: ${strategy.kind} replicates the model, but scheme '${scheme.name}' splits it (tp.degree ${scheme.tp.degree})`);
  }
  if (s.qlora && !s.lora) out.push('qlora: quantizes a frozen base, so it goes with lora (the adapters)');
  if (s.lora && strategy.kind !== 'single') out.push(`lora: adapters train on one device for now, not under strategy ${strategy.kind}`);
  if (strategy.kind === 'diloco') {
    const f = strategy.fragments ?? 1;
    if (strategy.innerSteps % f !== 0) out.push(`strategy.innerSteps: H = ${strategy.innerSteps} is not a multiple of the ${f} fragments`);
    if (f > model.num_hidden_layers) out.push(`strategy.fragments: ${f} fragments for a model of ${model.num_hidden_layers} layers`);
    if (f === 1 && (strategy.overlap ?? 0) !== 0) out.push('strategy.overlap: needs streaming (fragments > 1)');
    if (f > 1 && strategy.overlap !== undefined && strategy.overlap >= strategy.innerSteps / f) {
      out.push(`strategy.overlap: ${strategy.overlap} must be below H/F = ${strategy.innerSteps / f}`);
    }
  }
  return out;
}

/** Every problem of `raw` as a run spec, one line each naming its field (empty: valid). */
export function runSpecProblems(raw: unknown): string[] {
  const r = RunSpecSchema.safeParse(raw);
  if (!r.success) return schemaProblems(RunSpecSchema, raw, r.error);
  return crossFieldProblems(r.data);
}

/** The one validator: the spec, or a RunSpecError listing every problem. */
export function validateRunSpec(raw: unknown): RunSpec {
  const r = RunSpecSchema.safeParse(raw);
  const problems = r.success ? crossFieldProblems(r.data) : schemaProblems(RunSpecSchema, raw, r.error);
  if (problems.length) throw new RunSpecError(problems);
  return r.data!;
}

/** The run's length in steps. */
export const stepsOf = (s: RunSpec): number => s.optimizer.total_steps;

/** The engine's training options (the Trainer's input) of a spec. */
export function trainOptionsOf(s: RunSpec): TrainOptions {
  return {
    model: s.model, optimizer: s.optimizer, batch: s.batch, seq: s.seq, seed: s.seed,
    evalEvery: s.cadence.evalEvery, evalBatches: s.cadence.evalBatches, ...(s.scheme ? { scheme: s.scheme } : {}),
    ...(s.lora ? { lora: s.lora } : {}),
    ...(s.qlora ? { qlora: s.qlora } : {}),
    ...(s.checkpointActivations ? { checkpointActivations: true } : {}),
  };
}

/** A spec as a trainer runs it: the options it resolved (a memory budget turned into bits, the tokenizer's vocabulary). */
export function specWithOptions(s: RunSpec, o: TrainOptions): RunSpec {
  const { scheme: _s, ...rest } = s;
  return {
    ...rest, model: o.model, optimizer: o.optimizer, batch: o.batch, seq: o.seq, seed: o.seed,
    cadence: { ...s.cadence, evalEvery: o.evalEvery, evalBatches: o.evalBatches }, ...(o.scheme ? { scheme: o.scheme } : {}),
  };
}

export interface CadenceContext {
  /** The trainer was restored from a checkpoint (no end checkpoint when it then takes no step). */
  resumed?: boolean;
  /** The prompt when the spec names none (a newline in the tokenizer's vocabulary). */
  prompt?: string;
}

/**
 * The training loop's cadence of a spec: the one definition every runTraining caller takes (the
 * worker, npm run train, the headless peer and the group's members). The sampler's seed after
 * step s is seed + s, so a sample depends only on the run and its step.
 */
export function cadenceOf(s: RunSpec, ctx: CadenceContext = {}): LoopCadence {
  const c = s.cadence;
  return {
    steps: stepsOf(s),
    evalEvery: c.evalEvery,
    checkpointEvery: c.checkpointEvery,
    checkpointAtEnd: true,
    resumed: ctx.resumed ?? false,
    ...(c.sampleLength > 0
      ? { sample: { every: c.sampleEvery, length: c.sampleLength, atEnd: c.sampleAtEnd, prompt: c.samplePrompt ?? ctx.prompt ?? '\n', temperature: c.temperature, seed: (step: number) => s.seed + step } }
      : {}),
  };
}

