/**
 * LoRA adapters as a PEFT adapter directory, the files `PeftModel.save_pretrained` writes for a
 * LlamaForCausalLM and `PeftModel.from_pretrained` reads:
 *   adapter_config.json        LoraConfig as json.dumps(asdict(config), indent=2, sort_keys=True)
 *                              (no trailing newline, Python's float and ASCII escapes);
 *   adapter_model.safetensors  get_peft_model_state_dict(model): the lora_A / lora_B weights with the
 *                              adapter name dropped and PEFT's `base_model.model.` prefix, e.g.
 *                              base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight [r, in],
 *                              F32, metadata {"format": "pt"} (safetensors' save_file layout).
 * The config holds LoraConfig's keys as of PEFT 0.10 (the release that added layer_replication), all
 * at the values of a plain LoRA: every PEFT since 0.10 loads it without a warning and fills the keys
 * added later with their defaults (which are a plain LoRA too).
 *
 * Import reads adapters made by PEFT (any 0.x) and refuses, naming each problem, whatever this lab
 * cannot run exactly: DoRA, rsLoRA, per-module ranks or alphas, biases, saved extra modules, adapters
 * on some layers only, inits that rewrite the base (PiSSA, OLoRA, CorDA, LoftQ), pickled weights.
 */
import { type ModelConfig, paramSpecs } from '../model/config';
import { bf16ToF32, f16ToF32, readSafetensors, writeSafetensors, type SafeTensor } from '../io/safetensors';
import { LORA_MODULE, LORA_TARGETS, loraAdapters, LoraSpecSchema, peftModuleName, type LoraSpec, type LoraTarget } from './spec';

/** PeftModel (task CAUSAL_LM) → LoraModel → LlamaForCausalLM: the prefix of every saved key. */
export const PEFT_PREFIX = 'base_model.model.';
export const PEFT_CONFIG = 'adapter_config.json';
export const PEFT_WEIGHTS = 'adapter_model.safetensors';
/** What older PEFT (or safe_serialization=False) writes: a torch pickle. */
export const PEFT_PICKLE = 'adapter_model.bin';

export interface PeftAdapterFiles {
  'adapter_config.json': string;
  'adapter_model.safetensors': Uint8Array;
}

/** Files as read from disk or a zip: JSON may come as bytes, safetensors must. */
export type PeftFilesIn = Record<string, Uint8Array | string | undefined>;

export interface PeftExportOptions {
  /** base_model_name_or_path (a Hub id or a path; null when not given, as PEFT writes for a bare model). */
  baseModel?: string;
}

export interface PeftAdapter {
  spec: LoraSpec;
  /** Lab names (`model.layers.{l}.{module}.lora_A.weight`); F32 arrays may be views into the file's bytes. */
  tensors: Map<string, Float32Array>;
  /** base_model_name_or_path of the config (null when absent). */
  baseModel: string | null;
  /** Config keys this lab does not know (written by a newer PEFT); PEFT's own loader drops such keys too. */
  ignoredKeys: string[];
}

const fmt = (s: readonly number[]) => `[${s.join(', ')}]`;

/** A number json.dumps writes as a Python float (0.0, 1e-05) rather than an int. */
class PyFloat {
  constructor(readonly v: number) {}
}

/** Python's repr(float): shortest round-trip digits, exponent form below 1e-4 and from 1e16. */
export function pyFloatRepr(x: number): string {
  if (!Number.isFinite(x)) return Number.isNaN(x) ? 'NaN' : x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mant, expStr] = x.toExponential().split('e');
  const exp = Number(expStr);
  const neg = mant.startsWith('-');
  const digits = mant.replace('-', '').replace('.', '');
  const sign = neg ? '-' : '';
  if (exp < -4 || exp >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  const int = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
  const frac = digits.slice(exp + 1);
  return `${sign}${int}.${frac || '0'}`;
}

/** json.dumps(v, indent=2, sort_keys=True) with ensure_ascii (Python's defaults but the indent). */
function pyJson(v: unknown, ind = ''): string {
  if (v === null || v === undefined) return 'null';
  if (v instanceof PyFloat) return pyFloatRepr(v.v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  if (typeof v === 'number') return Number.isInteger(v) ? String(v) : pyFloatRepr(v);
  if (typeof v === 'string') return JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  const next = ind + '  ';
  if (Array.isArray(v)) return v.length ? `[\n${v.map((x) => next + pyJson(x, next)).join(',\n')}\n${ind}]` : '[]';
  const keys = Object.keys(v as object).sort();
  if (!keys.length) return '{}';
  return `{\n${keys.map((k) => `${next}${pyJson(k)}: ${pyJson((v as Record<string, unknown>)[k], next)}`).join(',\n')}\n${ind}}`;
}

/** The adapter_config.json object of a spec, as LoraConfig(...).to_dict() holds it (PEFT 0.10 keys). */
export function peftAdapterConfig(spec: LoraSpec, o: PeftExportOptions = {}): Record<string, unknown> {
  const s = LoraSpecSchema.parse(spec);
  return {
    alpha_pattern: {},
    auto_mapping: null,
    base_model_name_or_path: o.baseModel ?? null,
    bias: 'none',
    fan_in_fan_out: false,
    // save_pretrained sets inference_mode = True in the file it writes (and restores the model's own).
    inference_mode: true,
    init_lora_weights: true,
    layer_replication: null,
    layers_pattern: null,
    layers_to_transform: null,
    loftq_config: {},
    // LoraConfig types lora_alpha as int; a fractional alpha stays a float, as Python would keep it.
    lora_alpha: s.alpha,
    lora_dropout: new PyFloat(s.dropout),
    megatron_config: null,
    megatron_core: 'megatron.core',
    modules_to_save: null,
    peft_type: 'LORA',
    r: s.rank,
    rank_pattern: {},
    revision: null,
    target_modules: LORA_TARGETS.filter((t) => s.targets.includes(t)).map(peftModuleName),
    task_type: 'CAUSAL_LM',
    use_dora: false,
    use_rslora: false,
  };
}

/** Checks an adapter tensor map against the spec's adapters; problems as lines. */
function checkAdapterTensors(c: ModelConfig, spec: LoraSpec, tensors: Map<string, { length: number }>): string[] {
  const want = new Map<string, number[]>();
  for (const a of loraAdapters(c, spec)) {
    want.set(a.a, [spec.rank, a.in]);
    want.set(a.b, [a.out, spec.rank]);
  }
  const out: string[] = [];
  const missing = [...want].filter(([n]) => !tensors.has(n)).map(([n, s]) => `${n} ${fmt(s)}`);
  const unexpected = [...tensors.keys()].filter((n) => !want.has(n));
  const wrong = [...tensors].filter(([n, a]) => want.has(n) && a.length !== want.get(n)!.reduce((x, y) => x * y, 1))
    .map(([n, a]) => `${n}: ${a.length} elements, want ${fmt(want.get(n)!)}`);
  if (missing.length) out.push(`missing ${missing.length}: ${missing.join(', ')}`);
  if (unexpected.length) out.push(`unexpected ${unexpected.length}: ${unexpected.join(', ')}`);
  if (wrong.length) out.push(`wrong size ${wrong.length}: ${wrong.join('; ')}`);
  return out;
}

/** A PEFT adapter directory of `tensors` (lab names, exactly the spec's adapters, F32). */
export function exportPeftAdapter(c: ModelConfig, spec: LoraSpec, tensors: Map<string, Float32Array>, o: PeftExportOptions = {}): PeftAdapterFiles {
  const s = LoraSpecSchema.parse(spec);
  const problems = checkAdapterTensors(c, s, tensors);
  if (problems.length) throw new Error(`cannot export the LoRA adapter:\n  ${problems.join('\n  ')}`);
  const list = loraAdapters(c, s).flatMap((a) => [
    { name: PEFT_PREFIX + a.a, dtype: 'F32' as const, shape: [s.rank, a.in], data: tensors.get(a.a)! },
    { name: PEFT_PREFIX + a.b, dtype: 'F32' as const, shape: [a.out, s.rank], data: tensors.get(a.b)! },
  ]);
  return {
    'adapter_config.json': pyJson(peftAdapterConfig(s, o)),
    'adapter_model.safetensors': writeSafetensors(list, { format: 'pt' }),
  };
}

function asText(name: string, v: Uint8Array | string): string {
  if (typeof v === 'string') return v;
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(v);
  } catch {
    throw new Error(`${name} is not valid UTF-8`);
  }
}

/** Every module of a LlamaForCausalLM that PEFT's target_modules could name (its linear layers and embeddings). */
function candidateModules(c: ModelConfig): { name: string; layer: number | null; target: LoraTarget | null }[] {
  const out: { name: string; layer: number | null; target: LoraTarget | null }[] = [{ name: 'model.embed_tokens', layer: null, target: null }];
  for (let l = 0; l < c.num_hidden_layers; l++) {
    for (const t of LORA_TARGETS) out.push({ name: `model.layers.${l}.${LORA_MODULE[t]}`, layer: l, target: t });
  }
  out.push({ name: 'lm_head', layer: null, target: null });
  return out;
}

/**
 * PEFT's check_target_module_exists for a list or a regex: a list entry matches a module named
 * exactly so or ending in ".entry"; a string is a regex that must match the whole name.
 */
function moduleMatcher(key: string, v: unknown, problems: string[]): ((name: string) => boolean) | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') {
    try {
      const re = new RegExp(`^(?:${v})$`);
      return (n) => re.test(n);
    } catch (e) {
      problems.push(`${key} ${JSON.stringify(v)} is not a regular expression this lab can read: ${(e as Error).message}`);
      return null;
    }
  }
  if (Array.isArray(v) && v.every((x) => typeof x === 'string')) {
    const list = v as string[];
    return (n) => list.some((t) => n === t || n.endsWith(`.${t}`));
  }
  problems.push(`${key} ${JSON.stringify(v)} is neither a list of module names nor a regex string`);
  return null;
}

const isEmpty = (v: unknown) => v === null || v === undefined || (Array.isArray(v) && v.length === 0) || (typeof v === 'object' && !Array.isArray(v) && Object.keys(v as object).length === 0);

/**
 * LoraConfig keys and whether a value keeps the adapter a plain LoRA this lab runs exactly; the
 * message says what the option does. Keys handled elsewhere (r, alpha, targets…) are listed as null.
 */
const OPTION_CHECKS: Record<string, ((v: unknown) => string | null) | null> = {
  peft_type: null, task_type: null, r: null, lora_alpha: null, lora_dropout: null, target_modules: null, exclude_modules: null,
  layers_to_transform: null, layers_pattern: null, base_model_name_or_path: null, revision: null, inference_mode: null,
  auto_mapping: null, peft_version: null, megatron_core: null, qalora_group_size: null, ensure_weight_tying: null,
  use_dora: (v) => (v === true ? 'use_dora true (DoRA adds a magnitude vector per module)' : null),
  use_rslora: (v) => (v === true ? 'use_rslora true (scale alpha/sqrt(r) instead of alpha/r)' : null),
  fan_in_fan_out: (v) => (v === true ? 'fan_in_fan_out true (Conv1D-style transposed weights; Llama has none)' : null),
  bias: (v) => (v === undefined || v === 'none' ? null : `bias ${JSON.stringify(v)} (trained biases; only "none" is supported)`),
  lora_bias: (v) => (v === true ? 'lora_bias true (a bias on lora_B)' : null),
  rank_pattern: (v) => (isEmpty(v) ? null : `rank_pattern ${JSON.stringify(v)} (per-module ranks; one rank for all modules is supported)`),
  alpha_pattern: (v) => (isEmpty(v) ? null : `alpha_pattern ${JSON.stringify(v)} (per-module alphas; one alpha for all modules is supported)`),
  modules_to_save: (v) => (isEmpty(v) ? null : `modules_to_save ${JSON.stringify(v)} (fully trained extra modules are not supported)`),
  trainable_token_indices: (v) => (isEmpty(v) ? null : 'trainable_token_indices (trained embedding rows are not supported)'),
  layer_replication: (v) => (isEmpty(v) ? null : 'layer_replication (a deeper model built from repeated layers is not supported)'),
  megatron_config: (v) => (isEmpty(v) ? null : 'megatron_config (Megatron-parallel LoRA layers are not supported)'),
  use_qalora: (v) => (v === true ? 'use_qalora true (QA-LoRA pools the adapter input)' : null),
  alora_invocation_tokens: (v) => (isEmpty(v) ? null : 'alora_invocation_tokens (activated LoRA is not supported)'),
  target_parameters: (v) => (isEmpty(v) ? null : 'target_parameters (LoRA on bare parameters is not supported)'),
  use_bdlora: (v) => (isEmpty(v) ? null : 'use_bdlora (block-diagonal LoRA is not supported)'),
  arrow_config: (v) => (isEmpty(v) ? null : 'arrow_config (Arrow routing is not supported)'),
  velora_config: (v) => (isEmpty(v) ? null : 'velora_config is not supported'),
  monteclora_config: (v) => (isEmpty(v) ? null : 'monteclora_config is not supported'),
  kasa_config: (v) => (isEmpty(v) ? null : 'kasa_config (KaSA adapters are not supported)'),
  // Init-time only: they shape the starting adapter, not what the saved one computes.
  loftq_config: null, eva_config: null, corda_config: null, lora_ga_config: null,
  // Inits that also rewrite the base weights: such an adapter only works on the rewritten base.
  init_lora_weights: (v) => (v === undefined || v === true || v === false || v === 'gaussian' || v === 'eva' || v === 'orthogonal'
    ? null
    : `init_lora_weights ${JSON.stringify(v)} (this init changes the base weights; convert the adapter with PEFT's path_initial_model_for_weight_conversion first)`),
};

const TENSOR_RE = /^base_model\.model\.(model\.layers\.(\d+)\.(self_attn\.[qkvo]_proj|mlp\.(?:gate|up|down)_proj)\.lora_[AB]\.weight)$/;

/** Widens a tensor to F32 (F16/BF16 exactly), or returns a problem line. */
function toF32(name: string, t: SafeTensor): Float32Array | string {
  if (t.dtype === 'F32') return t.data as Float32Array;
  if (t.dtype === 'BF16') return bf16ToF32(t.data as Uint16Array);
  if (t.dtype === 'F16') return f16ToF32(t.data as Uint16Array);
  return `${name} has dtype ${t.dtype}, want F32 (or F16/BF16)`;
}

/**
 * Reads a PEFT LoRA adapter directory for a model of config `c`: its spec and tensors under lab
 * names. Every problem found is listed in one Error.
 */
export function importPeftAdapter(c: ModelConfig, files: PeftFilesIn): PeftAdapter {
  const cfgRaw = files[PEFT_CONFIG];
  if (cfgRaw === undefined) throw new Error(`not a PEFT adapter: no ${PEFT_CONFIG} (a PEFT adapter directory holds ${PEFT_CONFIG} and ${PEFT_WEIGHTS})`);
  let raw: unknown;
  try {
    raw = JSON.parse(asText(PEFT_CONFIG, cfgRaw));
  } catch (e) {
    throw new Error(`${PEFT_CONFIG} is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new Error(`${PEFT_CONFIG} is not a JSON object`);
  const j = raw as Record<string, unknown>;
  if (j.peft_type !== 'LORA') throw new Error(`${PEFT_CONFIG}: peft_type ${JSON.stringify(j.peft_type)} is not supported (only "LORA" adapters)`);
  if (j.task_type != null && j.task_type !== 'CAUSAL_LM') throw new Error(`${PEFT_CONFIG}: task_type ${JSON.stringify(j.task_type)} is not supported (want "CAUSAL_LM" for a LlamaForCausalLM)`);

  const problems: string[] = [];
  const ignoredKeys = Object.keys(j).filter((k) => !(k in OPTION_CHECKS));
  for (const [k, check] of Object.entries(OPTION_CHECKS)) {
    const msg = check?.(j[k]);
    if (msg) problems.push(`unsupported option: ${msg}`);
  }
  const r = j.r;
  if (typeof r !== 'number' || !Number.isInteger(r) || r < 1) problems.push(`r ${JSON.stringify(r)} is not a positive integer`);
  const alpha = j.lora_alpha ?? 8; // LoraConfig's default
  if (typeof alpha !== 'number' || !(alpha > 0)) problems.push(`lora_alpha ${JSON.stringify(alpha)} is not a positive number`);
  const dropout = j.lora_dropout ?? 0;
  if (typeof dropout !== 'number' || !(dropout >= 0 && dropout < 1)) problems.push(`lora_dropout ${JSON.stringify(dropout)} is not in [0, 1)`);

  // Which modules the config adapts, by PEFT's own matching rules over a LlamaForCausalLM's modules.
  let targetsRaw = j.target_modules;
  // "all-linear" is expanded when the model is built; a hand-written config may still carry it (lm_head is excluded by PEFT).
  if (targetsRaw === 'all-linear') targetsRaw = LORA_TARGETS.map(peftModuleName);
  if (targetsRaw == null) problems.push('target_modules is missing (PEFT would pick defaults by model type; name the modules)');
  const include = moduleMatcher('target_modules', targetsRaw, problems);
  const exclude = moduleMatcher('exclude_modules', j.exclude_modules, problems);
  let layers: Set<number> | null = null;
  const ltt = j.layers_to_transform;
  if (typeof ltt === 'number') layers = new Set([ltt]);
  else if (Array.isArray(ltt) && ltt.every((x) => Number.isInteger(x))) layers = new Set(ltt as number[]);
  else if (ltt != null) problems.push(`layers_to_transform ${JSON.stringify(ltt)} is not a layer index or a list of them`);
  const matched = candidateModules(c).filter((m) => include?.(m.name) && !exclude?.(m.name) && (layers === null || m.layer === null || layers.has(m.layer)));
  const foreign = matched.filter((m) => m.target === null).map((m) => m.name);
  if (foreign.length) problems.push(`target_modules adapt ${foreign.join(', ')}: only the linear layers ${LORA_TARGETS.map(peftModuleName).join(', ')} can carry adapters here`);
  if (Array.isArray(targetsRaw)) {
    const unknown = (targetsRaw as unknown[]).filter((t) => typeof t === 'string' && !candidateModules(c).some((m) => m.name === t || m.name.endsWith(`.${t}`)));
    if (unknown.length) problems.push(`target_modules name modules a Llama model does not have: ${unknown.join(', ')}`);
  }
  const targets = LORA_TARGETS.filter((t) => matched.some((m) => m.target === t));
  for (const t of targets) {
    const got = matched.filter((m) => m.target === t).length;
    if (got !== c.num_hidden_layers) problems.push(`the config adapts ${peftModuleName(t)} in ${got} of ${c.num_hidden_layers} layers: adapters must sit on every layer`);
  }
  if (include && !targets.length && !foreign.length) problems.push(`target_modules ${JSON.stringify(targetsRaw)} match no linear layer of the model`);

  // The weights.
  const bytes = files[PEFT_WEIGHTS];
  if (bytes === undefined) {
    if (files[PEFT_PICKLE] !== undefined) {
      throw new Error(`${PEFT_PICKLE} is a torch pickle, which this lab does not read: save the adapter with PEFT's `
        + `save_pretrained(dir, safe_serialization=True) (the default since PEFT 0.6) to get ${PEFT_WEIGHTS}`);
    }
    throw new Error(`PEFT adapter has ${PEFT_CONFIG} but no ${PEFT_WEIGHTS}`);
  }
  if (!(bytes instanceof Uint8Array)) throw new Error(`${PEFT_WEIGHTS} must be bytes`);
  let file;
  try {
    file = readSafetensors(bytes);
  } catch (e) {
    throw new Error(`${PEFT_WEIGHTS}: ${(e as Error).message}`);
  }
  if (problems.length) throw new Error(`${PEFT_CONFIG} describes an adapter this lab cannot use:\n  ${problems.join('\n  ')}`);

  let spec: LoraSpec;
  try {
    spec = LoraSpecSchema.parse({ rank: r, alpha, dropout, targets });
    loraAdapters(c, spec); // throws when r exceeds a module's smaller side
  } catch (e) {
    throw new Error(`${PEFT_CONFIG}: ${(e as Error).message}`);
  }

  const want = new Map<string, number[]>();
  for (const a of loraAdapters(c, spec)) {
    want.set(a.a, [spec.rank, a.in]);
    want.set(a.b, [a.out, spec.rank]);
  }
  const tensors = new Map<string, Float32Array>();
  const unexpected: string[] = [];
  const wrong: string[] = [];
  for (const [name, t] of file.tensors) {
    const lab = TENSOR_RE.exec(name)?.[1];
    const shape = lab === undefined ? undefined : want.get(lab);
    if (lab === undefined || !shape) {
      unexpected.push(`${name} ${fmt(t.shape)}`);
      continue;
    }
    if (t.shape.length !== 2 || t.shape[0] !== shape[0] || t.shape[1] !== shape[1]) {
      wrong.push(`${name}: ${fmt(t.shape)}, want ${fmt(shape)}`);
      continue;
    }
    const a = toF32(name, t);
    if (typeof a === 'string') {
      problems.push(a);
      continue;
    }
    if (!a.every(Number.isFinite)) problems.push(`${name} holds non-finite values`);
    tensors.set(lab, a);
  }
  const missing = [...want].filter(([n]) => !tensors.has(n) && !wrong.some((w) => w.startsWith(PEFT_PREFIX + n + ':'))).map(([n, s]) => `${PEFT_PREFIX}${n} ${fmt(s)}`);
  if (missing.length) problems.push(`missing ${missing.length}: ${missing.join(', ')}`);
  if (unexpected.length) {
    const hint = [...file.tensors.keys()].every((n) => !n.startsWith(PEFT_PREFIX)) ? ` (PEFT's names start with "${PEFT_PREFIX}")` : '';
    problems.push(`unexpected ${unexpected.length} (not adapters of the config's target_modules on this model)${hint}: ${unexpected.join(', ')}`);
  }
  if (wrong.length) {
    problems.push(`wrong shape ${wrong.length} (lora_A is [r, in], lora_B is [out, r] with r ${spec.rank} from ${PEFT_CONFIG} and in/out from the model's config; `
      + `was the adapter made for another model?): ${wrong.join('; ')}`);
  }
  if (problems.length) throw new Error(`${PEFT_WEIGHTS} does not match ${PEFT_CONFIG} and the model (${describe(c)}):\n  ${problems.join('\n  ')}`);
  return { spec, tensors, baseModel: typeof j.base_model_name_or_path === 'string' ? j.base_model_name_or_path : null, ignoredKeys };
}

function describe(c: ModelConfig): string {
  const w = new Map(paramSpecs(c).map((p) => [p.name, p.shape]));
  const kv = w.get('model.layers.0.self_attn.k_proj.weight')![0];
  return `${c.num_hidden_layers} layers, hidden ${c.hidden_size}, k/v width ${kv}, intermediate ${c.intermediate_size}`;
}

/** Whether a set of files is a PEFT adapter directory (rather than a full checkpoint). */
export const isPeftAdapter = (files: PeftFilesIn): boolean => files[PEFT_CONFIG] !== undefined;
