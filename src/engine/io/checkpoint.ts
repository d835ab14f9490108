/**
 * Checkpoints as a Hugging Face model directory plus the lab's own training state:
 *   model.safetensors      exactly the HF state dict of paramSpecs(config), F32, metadata {"format": "pt"}
 *                          (lm_head.weight omitted when tie_word_embeddings, as save_pretrained does), so
 *                          `LlamaForCausalLM.from_pretrained(dir)` loads it unchanged;
 *   config.json            hfConfigJson(config);
 *   optimizer.safetensors  AdamW moments as "exp_avg.<param>" / "exp_avg_sq.<param>" (torch's state
 *                          names), F32, step in the metadata;
 *   lab.json               tokenizer and training state (anything JSON);
 *   tokenizer.json, tokenizer_config.json, generation_config.json
 *                          the run's tokenizer as transformers' PreTrainedTokenizerFast reads it, and its
 *                          end-of-text token for generation (when the run has a tokenizer).
 * A LoRA run's checkpoint adds its adapters as PEFT writes them (adapter_config.json,
 * adapter_model.safetensors: engine/lora/peft.ts); its model.safetensors is then the frozen base and
 * optimizer.safetensors holds the adapters' moments.
 * Loading checks every name, shape and dtype against the config and lists all problems at once. It
 * reads Hugging Face model directories too: weights in one model.safetensors or sharded with
 * model.safetensors.index.json, in F32, F16 or BF16 (widened exactly), with their tokenizer.json.
 */
import { hfConfigJson, ModelConfigSchema, paramSpecs, validateModelConfig, type ModelConfig } from '../model/config';
import { bf16ToF32, f16ToF32, readSafetensors, writeSafetensors, type SafeTensor, type SafeTensorIn } from './safetensors';
import { exportPeftAdapter, importPeftAdapter, PEFT_CONFIG } from '../lora/peft';
import { loraParamSpecs, type LoraSpec } from '../lora/spec';

export const OPTIMIZER_FORMAT = 'lab-adamw-v1';
export const LAB_FORMAT = 'webgpu-lab-checkpoint';
export const LAB_VERSION = 1;

export interface OptimizerState {
  m: Map<string, Float32Array>;
  v: Map<string, Float32Array>;
  /** Number of optimizer steps taken (torch's state["step"]); bias corrections use it. */
  step: number;
}

/** What the HF export writes of a tokenizer: its tokenizer.json and end-of-text token. */
export interface HfTokenizerFiles {
  json: object;
  eos: { id: number; content: string } | null;
}

export interface CheckpointExtra {
  optimizer?: OptimizerState;
  /** lab.json's tokenizer, or else the directory's tokenizer.json. */
  tokenizer?: object;
  /** tokenizer_config.json, when the directory has one (loading only). */
  tokenizerConfig?: Record<string, unknown>;
  train?: object;
  /** Saving only: written as tokenizer.json, tokenizer_config.json and generation_config.json. */
  hfTokenizer?: HfTokenizerFiles;
}

/** A LoRA run's adapters (names as engine/lora/spec.ts): the optimizer's moments are theirs. */
export interface CheckpointAdapters {
  spec: LoraSpec;
  tensors: Map<string, Float32Array>;
  /** adapter_config.json's base_model_name_or_path (where the frozen base came from). */
  baseModel?: string;
}

export interface Checkpoint {
  config: ModelConfig;
  /** Every parameter (with adapters: the frozen base). */
  params: Map<string, Float32Array>;
  adapters?: CheckpointAdapters;
  extra?: CheckpointExtra;
}

export interface CheckpointFiles {
  'model.safetensors': Uint8Array;
  'config.json': string;
  'optimizer.safetensors'?: Uint8Array;
  'lab.json'?: string;
  'tokenizer.json'?: string;
  'tokenizer_config.json'?: string;
  'generation_config.json'?: string;
  'adapter_config.json'?: string;
  'adapter_model.safetensors'?: Uint8Array;
}

/** Files as read from disk or a zip: JSON may come as bytes, safetensors must. */
export type CheckpointFilesIn = Record<string, Uint8Array | string | undefined>;

const numel = (s: number[]) => s.reduce((a, b) => a * b, 1);
const fmt = (s: number[]) => `[${s.join(', ')}]`;

/** Checks a name → array map against specs; returns problems as lines (empty when all is well). */
function checkTensorSet(
  what: string,
  specs: { name: string; shape: number[] }[],
  got: Map<string, { length: number }>,
): string[] {
  const want = new Map(specs.map((s) => [s.name, s.shape]));
  const missing = specs.filter((s) => !got.has(s.name)).map((s) => `${s.name} ${fmt(s.shape)}`);
  const unexpected = [...got.keys()].filter((k) => !want.has(k));
  const wrong: string[] = [];
  for (const [name, a] of got) {
    const shape = want.get(name);
    if (shape && a.length !== numel(shape)) wrong.push(`${name}: ${a.length} elements, want ${fmt(shape)} = ${numel(shape)}`);
  }
  const out: string[] = [];
  if (missing.length) out.push(`${what}: missing ${missing.length}: ${missing.join(', ')}`);
  if (unexpected.length) out.push(`${what}: unexpected ${unexpected.length}: ${unexpected.join(', ')}`);
  if (wrong.length) out.push(`${what}: wrong size ${wrong.length}: ${wrong.join('; ')}`);
  return out;
}

export function saveCheckpoint(ck: Checkpoint): CheckpointFiles {
  const config = validateModelConfig(ck.config);
  const specs = paramSpecs(config);
  const problems = checkTensorSet('params', specs, ck.params);
  // What the optimizer trains: every parameter, or the adapters.
  const trained = ck.adapters ? loraParamSpecs(config, ck.adapters.spec) : specs;
  if (ck.adapters) problems.push(...checkTensorSet('adapters', trained, ck.adapters.tensors));
  const opt = ck.extra?.optimizer;
  if (opt) {
    problems.push(...checkTensorSet('optimizer m', trained, opt.m), ...checkTensorSet('optimizer v', trained, opt.v));
    if (!Number.isSafeInteger(opt.step) || opt.step < 0) problems.push(`optimizer step ${opt.step} is not a non-negative integer`);
  }
  if (problems.length) throw new Error(`cannot save checkpoint:\n  ${problems.join('\n  ')}`);

  const f32 = (name: string, shape: number[], data: Float32Array): SafeTensorIn => ({ name, dtype: 'F32', shape, data });
  const tok = ck.extra?.hfTokenizer;
  const eosId = tok?.eos?.id ?? null;
  const json = (v: unknown) => JSON.stringify(v, null, 2) + '\n';
  const files: CheckpointFiles = {
    'model.safetensors': writeSafetensors(specs.map((s) => f32(s.name, s.shape, ck.params.get(s.name)!)), { format: 'pt' }),
    'config.json': json(eosId === null ? hfConfigJson(config) : { ...hfConfigJson(config), eos_token_id: eosId }),
  };
  if (tok) {
    files['tokenizer.json'] = JSON.stringify(tok.json) + '\n';
    files['tokenizer_config.json'] = json({
      tokenizer_class: 'PreTrainedTokenizerFast', model_max_length: config.max_position_embeddings, clean_up_tokenization_spaces: false,
      add_bos_token: false, add_eos_token: false, bos_token: null, eos_token: tok.eos?.content ?? null, unk_token: null, pad_token: null,
    });
    // pad = eos: transformers pads (and stops) with it instead of warning that there is no pad token.
    files['generation_config.json'] = json({ bos_token_id: null, eos_token_id: eosId, pad_token_id: eosId, do_sample: true, max_length: config.max_position_embeddings });
  }
  if (opt) {
    const t: SafeTensorIn[] = [];
    for (const s of trained) t.push(f32(`exp_avg.${s.name}`, s.shape, opt.m.get(s.name)!), f32(`exp_avg_sq.${s.name}`, s.shape, opt.v.get(s.name)!));
    files['optimizer.safetensors'] = writeSafetensors(t, { format: OPTIMIZER_FORMAT, step: String(opt.step) });
  }
  if (ck.adapters) Object.assign(files, exportPeftAdapter(config, ck.adapters.spec, ck.adapters.tensors, { baseModel: ck.adapters.baseModel }));
  if (ck.extra?.tokenizer !== undefined || ck.extra?.train !== undefined) {
    const lab = { format: LAB_FORMAT, version: LAB_VERSION, tokenizer: ck.extra?.tokenizer, train: ck.extra?.train };
    files['lab.json'] = JSON.stringify(lab, null, 2) + '\n';
  }
  return files;
}

function asText(name: string, v: Uint8Array | string | undefined): string | undefined {
  if (v === undefined || typeof v === 'string') return v;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(v);
  } catch {
    throw new Error(`${name} is not valid UTF-8`);
  }
}

function parseJson(name: string, text: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`${name} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error(`${name} is not a JSON object`);
  return v as Record<string, unknown>;
}

/**
 * Reads a HF LlamaConfig JSON into a ModelConfig. Keys the lab does not model are ignored, but those
 * that would change the network (biases, rope scaling, another activation) are refused; keys HF
 * defaults are filled with HF's defaults so configs written elsewhere load too.
 */
export function modelConfigFromHf(raw: Record<string, unknown>): ModelConfig {
  const bad: string[] = [];
  if (raw.model_type !== undefined && raw.model_type !== 'llama') bad.push(`model_type ${JSON.stringify(raw.model_type)} (want "llama")`);
  if (raw.hidden_act !== undefined && raw.hidden_act !== 'silu') bad.push(`hidden_act ${JSON.stringify(raw.hidden_act)} (want "silu")`);
  if (raw.attention_bias === true) bad.push('attention_bias true (no biases supported)');
  if (raw.mlp_bias === true) bad.push('mlp_bias true (no biases supported)');
  if (raw.rope_scaling != null) bad.push(`rope_scaling ${JSON.stringify(raw.rope_scaling)} (only plain RoPE supported)`);
  if (raw.pretraining_tp !== undefined && raw.pretraining_tp !== 1) bad.push(`pretraining_tp ${JSON.stringify(raw.pretraining_tp)} (want 1)`);
  const keys = Object.keys(ModelConfigSchema.shape);
  const picked: Record<string, unknown> = {};
  for (const k of keys) if (raw[k] !== undefined) picked[k] = raw[k];
  const rp = raw.rope_parameters as Record<string, unknown> | undefined;
  if (rp && typeof rp === 'object' && rp.rope_type !== undefined && rp.rope_type !== 'default') {
    bad.push(`rope_parameters.rope_type ${JSON.stringify(rp.rope_type)} (only plain RoPE supported)`);
  }
  if (picked.rope_theta === undefined && rp && typeof rp === 'object') picked.rope_theta = rp.rope_theta;
  // transformers.LlamaConfig defaults.
  picked.num_key_value_heads ??= picked.num_attention_heads;
  picked.rms_norm_eps ??= 1e-6;
  picked.rope_theta ??= 10000;
  picked.tie_word_embeddings ??= false;
  picked.initializer_range ??= 0.02;
  picked.max_position_embeddings ??= 2048;
  // Checked before the schema, so the key that makes a model foreign is named even when others are off too.
  const hd = Number(raw.hidden_size) / Number(raw.num_attention_heads);
  if (raw.head_dim != null && Number.isInteger(hd) && raw.head_dim !== hd) bad.push(`head_dim ${JSON.stringify(raw.head_dim)} != hidden_size / num_attention_heads = ${hd} (not supported)`);
  if (bad.length) throw new Error(`config.json describes a model this lab cannot run:\n  ${bad.join('\n  ')}`);
  return validateModelConfig(picked);
}

/** F32 as is; F16/BF16 widened exactly (HF models are often stored in half precision). */
function toF32(file: string, name: string, t: SafeTensor, problems: string[]): Float32Array | undefined {
  if (t.dtype === 'F32') return t.data as Float32Array;
  if (t.dtype === 'BF16') return bf16ToF32(t.data as Uint16Array);
  if (t.dtype === 'F16') return f16ToF32(t.data as Uint16Array);
  problems.push(`${file}: ${name} has dtype ${t.dtype}, want F32 (or F16/BF16)`);
  return undefined;
}

function collect(
  file: string,
  tensors: Map<string, SafeTensor>,
  specs: { name: string; shape: number[] }[],
  rename: (n: string) => string | null,
  problems: string[],
): Map<string, Float32Array> {
  const want = new Map(specs.map((s) => [s.name, s.shape]));
  const out = new Map<string, Float32Array>();
  const missing = new Set(specs.map((s) => s.name));
  const unexpected: string[] = [];
  const wrong: string[] = [];
  for (const [raw, t] of tensors) {
    const name = rename(raw);
    const shape = name === null ? undefined : want.get(name);
    if (name === null || !shape) {
      unexpected.push(`${raw} ${fmt(t.shape)}`);
      continue;
    }
    missing.delete(name);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      wrong.push(`${raw}: ${fmt(t.shape)}, want ${fmt(shape)}`);
      continue;
    }
    const a = toF32(file, raw, t, problems);
    if (a) out.set(name, a);
  }
  if (missing.size) problems.push(`${file}: missing ${missing.size}: ${[...missing].map((n) => `${n} ${fmt(want.get(n)!)}`).join(', ')}`);
  if (unexpected.length) problems.push(`${file}: unexpected ${unexpected.length}: ${unexpected.join(', ')}`);
  if (wrong.length) problems.push(`${file}: wrong shape ${wrong.length}: ${wrong.join('; ')}`);
  return out;
}

const INDEX = 'model.safetensors.index.json';

function readNamed(file: string, bytes: Uint8Array): Map<string, SafeTensor> {
  try {
    return readSafetensors(bytes).tensors;
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
}

/** Buffers older transformers versions saved beside the weights; derived from the config, so dropped. */
const isDerived = (name: string) => name.endsWith('.rotary_emb.inv_freq');

/** The model's tensors from model.safetensors, or from the shards model.safetensors.index.json maps them to. */
function modelTensors(files: CheckpointFilesIn): { file: string; tensors: Map<string, SafeTensor> } {
  const drop = (m: Map<string, SafeTensor>) => new Map([...m].filter(([n]) => !isDerived(n)));
  const single = files['model.safetensors'];
  if (single !== undefined) {
    if (!(single instanceof Uint8Array)) throw new Error('model.safetensors must be bytes');
    return { file: 'model.safetensors', tensors: drop(readNamed('model.safetensors', single)) };
  }
  const idxText = asText(INDEX, files[INDEX]);
  if (idxText === undefined) throw new Error(`checkpoint has no model.safetensors (as bytes) and no ${INDEX}`);
  const map = parseJson(INDEX, idxText).weight_map as Record<string, unknown> | undefined;
  if (typeof map !== 'object' || map === null || Array.isArray(map)) throw new Error(`${INDEX} has no weight_map object`);
  const problems: string[] = [];
  const tensors = new Map<string, SafeTensor>();
  const shards = [...new Set(Object.values(map))].sort();
  for (const shard of shards) {
    if (typeof shard !== 'string') {
      problems.push(`weight_map value ${JSON.stringify(shard)} is not a file name`);
      continue;
    }
    const bytes = files[shard];
    if (!(bytes instanceof Uint8Array)) {
      problems.push(`shard ${shard} is missing`);
      continue;
    }
    for (const [name, t] of readNamed(shard, bytes)) {
      if (map[name] === shard) tensors.set(name, t);
      else if (map[name] === undefined) problems.push(`${shard} holds ${name}, which weight_map does not list`);
      else problems.push(`${shard} holds ${name}, which weight_map puts in ${map[name]}`);
    }
  }
  for (const [name, shard] of Object.entries(map)) {
    if (!tensors.has(name) && files[shard as string] instanceof Uint8Array) problems.push(`weight_map puts ${name} in ${shard}, which does not hold it`);
  }
  if (problems.length) throw new Error(`${INDEX}: the shards do not match it:\n  ${problems.join('\n  ')}`);
  for (const n of [...tensors.keys()]) if (isDerived(n)) tensors.delete(n);
  return { file: `model.safetensors (${shards.length} shards)`, tensors };
}

/** The files of a folder a checkpoint reads (the CLI's --init DIR, a folder dropped into the page). */
export const isCheckpointFile = (name: string): boolean => /\.(json|safetensors)$/.test(name);

/** F32 params are views into the file bytes where aligned (no copy): do not reuse those bytes. */
export function loadCheckpoint(files: CheckpointFilesIn): Checkpoint {
  const cfgText = asText('config.json', files['config.json']);
  if (cfgText === undefined) throw new Error('checkpoint has no config.json');
  const config = modelConfigFromHf(parseJson('config.json', cfgText));
  const specs = paramSpecs(config);
  const problems: string[] = [];

  const model = modelTensors(files);
  const tied = config.tie_word_embeddings;
  const params = collect(model.file, model.tensors, specs, (n) => n, problems);
  if (tied && model.tensors.has('lm_head.weight')) problems.push(`${model.file}: lm_head.weight present but config has tie_word_embeddings = true`);

  // A LoRA run's adapters: the optimizer's moments are then theirs.
  let adapters: CheckpointAdapters | undefined;
  if (files[PEFT_CONFIG] !== undefined) {
    const a = importPeftAdapter(config, files);
    adapters = { spec: a.spec, tensors: a.tensors, ...(a.baseModel !== null ? { baseModel: a.baseModel } : {}) };
  }
  const trained = adapters ? loraParamSpecs(config, adapters.spec) : specs;
  const extra: CheckpointExtra = {};
  const optBytes = files['optimizer.safetensors'];
  if (optBytes !== undefined) {
    if (!(optBytes instanceof Uint8Array)) throw new Error('optimizer.safetensors must be bytes');
    let os;
    try {
      os = readSafetensors(optBytes);
    } catch (e) {
      throw new Error(`optimizer.safetensors: ${(e as Error).message}`);
    }
    if (os.metadata.format !== OPTIMIZER_FORMAT) problems.push(`optimizer.safetensors: format ${JSON.stringify(os.metadata.format)}, want "${OPTIMIZER_FORMAT}"`);
    const step = Number(os.metadata.step);
    if (!/^\d+$/.test(os.metadata.step ?? '') || !Number.isSafeInteger(step)) problems.push(`optimizer.safetensors: step ${JSON.stringify(os.metadata.step)} is not an integer`);
    const byPrefix = (p: string) => (n: string) => (n.startsWith(p) ? n.slice(p.length) : null);
    const mTensors = new Map([...os.tensors].filter(([n]) => !n.startsWith('exp_avg_sq.')));
    const vTensors = new Map([...os.tensors].filter(([n]) => n.startsWith('exp_avg_sq.')));
    const m = collect('optimizer.safetensors (exp_avg)', mTensors, trained, byPrefix('exp_avg.'), problems);
    const v = collect('optimizer.safetensors (exp_avg_sq)', vTensors, trained, byPrefix('exp_avg_sq.'), problems);
    extra.optimizer = { m, v, step };
  }
  const labText = asText('lab.json', files['lab.json']);
  if (labText !== undefined) {
    const lab = parseJson('lab.json', labText);
    if (lab.format !== LAB_FORMAT) problems.push(`lab.json: format ${JSON.stringify(lab.format)}, want "${LAB_FORMAT}"`);
    else if (typeof lab.version !== 'number' || lab.version > LAB_VERSION) problems.push(`lab.json: version ${JSON.stringify(lab.version)} is newer than this lab (${LAB_VERSION})`);
    if (lab.tokenizer !== undefined) extra.tokenizer = lab.tokenizer as object;
    if (lab.train !== undefined) extra.train = lab.train as object;
  }
  const tokText = asText('tokenizer.json', files['tokenizer.json']);
  if (extra.tokenizer === undefined && tokText !== undefined) extra.tokenizer = parseJson('tokenizer.json', tokText);
  const tokCfg = asText('tokenizer_config.json', files['tokenizer_config.json']);
  if (tokCfg !== undefined) extra.tokenizerConfig = parseJson('tokenizer_config.json', tokCfg);
  if (problems.length) throw new Error(`checkpoint does not match its config (${describe(config)}):\n  ${problems.join('\n  ')}`);
  return { config, params, ...(adapters ? { adapters } : {}), extra: Object.keys(extra).length ? extra : undefined };
}

function describe(c: ModelConfig): string {
  return `${c.num_hidden_layers} layers, hidden ${c.hidden_size}, vocab ${c.vocab_size}${c.tie_word_embeddings ? ', tied embeddings' : ''}`;
}
