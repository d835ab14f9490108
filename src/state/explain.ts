/**
 * Validation messages that teach: each problem says where, what is wrong, what is expected, and an
 * example of the accepted form (the value at the same place in a known-good object).
 */
import type { z } from 'zod';
import { ModelConfigSchema, type ModelConfig } from '../engine/model/config';
import { modelConfigKeyProblems } from '../engine/run/spec';
import { HALF_ONLY_SAVED } from '../engine/scheme/scheme';
import { suggestKey } from '../engine/util/keys';
import { checkRunConfig, DEFAULT_RUN_CONFIG, loraConfigProblem, RunConfigSchema, type RunConfig } from '../worker/protocol';

type Issue = z.core.$ZodIssue;

const QUANT_EXAMPLE = { format: 'int4', granularity: 'group', group: 128, rounding: 'nearest' };
/** Keys whose value is a quantization spec (the scheme grid's short "int4" stands for one). */
const QUANT_KEYS = new Set(['weights', 'gemm_inputs', 'gemm_output_grads', 'storage', 'wire', 'm', 'v']);

function valueAt(obj: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = obj;
  for (const k of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[k as string];
  }
  return v;
}

function isQuantPath(path: readonly PropertyKey[]): boolean {
  const keys = path.map(String);
  const i = keys.lastIndexOf('saved');
  return (i >= 0 && keys.length === i + 2) || (keys.length > 0 && QUANT_KEYS.has(keys.at(-1)!) && !keys.includes('tp'));
}

function exampleFor(path: readonly PropertyKey[], good: unknown): string | undefined {
  if (isQuantPath(path)) return `${JSON.stringify(QUANT_EXAMPLE)} (the grid's "int4" is short for this; formats fp32, int8, int4, fp8-e4m3…)`;
  const v = valueAt(good, path);
  return v === undefined ? undefined : JSON.stringify(v);
}

function what(issue: Issue, input: unknown): string {
  switch (issue.code) {
    case 'invalid_type': {
      const got = valueAt(input, issue.path);
      const received = got === undefined ? 'nothing' : Array.isArray(got) ? 'a list' : got === null ? 'null' : `a ${typeof got} (${JSON.stringify(got)?.slice(0, 40)})`;
      return `expected ${issue.expected === 'object' ? 'an object' : issue.expected === 'int' ? 'a whole number' : `a ${issue.expected}`}, got ${received}`;
    }
    case 'too_small':
      return `must be ${issue.inclusive === false ? 'more than' : 'at least'} ${String(issue.minimum)}${issue.origin === 'string' ? ' characters' : ''}`;
    case 'too_big':
      return `must be ${issue.inclusive === false ? 'less than' : 'at most'} ${String(issue.maximum)}${issue.origin === 'string' ? ' characters' : ''}`;
    case 'invalid_value':
      // bf16/f16 outside a saved cell: the schema's own message says where it is accepted.
      if (issue.message === HALF_ONLY_SAVED) return issue.message;
      return `must be one of ${issue.values.map((v) => JSON.stringify(v)).join(', ')}`;
    case 'unrecognized_keys':
      return `unknown key${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => JSON.stringify(k)).join(', ')} (check the spelling; extra keys are refused so a typo is not silently ignored)`;
    default:
      return issue.message;
  }
}

/** The valid keys nearest to unknown ones, among the keys of `good` at the same place (the CLI's suggestion). */
function nearestKeys(keys: readonly string[], good: unknown): string {
  if (good === null || typeof good !== 'object' || Array.isArray(good)) return '';
  return keys.map((k) => suggestKey(k, Object.keys(good))).join('');
}

/** One line per issue: `path: what is wrong; e.g. <example>`. `good` is a valid object of the same shape, `input` what was checked. */
export function explainIssues(issues: readonly Issue[], good: unknown, root: string, input: unknown): string[] {
  return issues.map((issue) => {
    const where = issue.path.length ? issue.path.map(String).join('.') : root;
    const ex = issue.code === 'unrecognized_keys' ? undefined : exampleFor(issue.path, good);
    return `${where}: ${what(issue, input)}${issue.code === 'unrecognized_keys' ? nearestKeys(issue.keys, valueAt(good, issue.path)) : ''}${ex ? `; e.g. ${ex}` : ''}`;
  });
}

/** What is wrong with a run config, taught (schema problems), else the engine's own check; null when runnable. */
export function runConfigProblem(raw: unknown): string | null {
  const lora = loraConfigProblem(raw);
  if (lora) return lora;
  const r = RunConfigSchema.safeParse(raw);
  if (!r.success) return explainIssues(r.error.issues, DEFAULT_RUN_CONFIG, 'settings', raw).join('; ');
  return checkRunConfig(r.data) ?? dataProblem(r.data);
}

/**
 * Prepared data too short for one sequence of the context (T + 1 tokens: inputs and their next
 * tokens) in the split a run reads: refused before Start, not after minutes of compiling.
 */
export function dataProblem(c: RunConfig): string | null {
  const d = c.data;
  if (!d) return null;
  const need = c.seq + 1;
  const short = (['train', 'val'] as const).filter((s) => (s === 'train' || c.evalEvery > 0) && d.tokens[s] < need);
  if (short.length === 0) return null;
  const have = short.map((s) => `${d.tokens[s]} token${d.tokens[s] === 1 ? '' : 's'} to ${s === 'train' ? 'train' : 'validate'} on`).join(' and ');
  return `the data is too short: it has ${have}, and one sequence of context ${c.seq} needs ${need}; use a longer text or a shorter context`;
}

/** A custom model config (Hugging Face keys), or what is wrong with it taught against `good`. */
export function parseModelConfig(raw: unknown, good: ModelConfig): { model: ModelConfig } | { error: string } {
  const r = ModelConfigSchema.safeParse(raw);
  return r.success ? { model: r.data } : { error: explainIssues(r.error.issues, good, 'config', raw).join('\n') };
}

const CONFIG_HINT = 'an object of Hugging Face LlamaConfig keys, e.g. {"hidden_size": 128, "num_hidden_layers": 4}';

/**
 * A custom model from the text of a config.json: keys not given come from `base`, Hugging Face keys
 * the model does not take (architectures, model_type, ...) are dropped, an unknown key is refused
 * naming the nearest valid one (the CLI's check), the rest checked as parseModelConfig does.
 */
export function modelFromText(text: string, base: ModelConfig): { model: ModelConfig } | { error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { error: `not JSON: ${(e as Error).message}. Expected ${CONFIG_HINT}` };
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) return { error: `expected ${CONFIG_HINT}` };
  // A misspelt key is refused with the nearest valid one, as the CLI's --config does; HF's own extras are dropped.
  const unknown = modelConfigKeyProblems(raw as Record<string, unknown>, 'config');
  if (unknown.length) return { error: unknown.join('\n') };
  const keys = Object.keys(base);
  return parseModelConfig(Object.fromEntries(Object.entries({ ...base, ...raw }).filter(([k]) => keys.includes(k))), base);
}
