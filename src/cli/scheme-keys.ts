/**
 * Keys of a user-written scheme file that the schema would drop or refuse without saying which
 * key was meant, and layer overrides for layers the model does not have (they would silently do nothing).
 */
import { ComputeSchema, LayerSchemeSchema, QuantSpecSchema, SAVED_KINDS, SchemeSchema } from '../engine/scheme/scheme';
import { unknownKeys } from '../engine/util/keys';

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const QUANT_KEYS = Object.keys(QuantSpecSchema.shape);
const LAYER_KEYS = Object.keys(LayerSchemeSchema.shape);
const NESTED: Record<string, string[]> = { grads: ['storage', 'wire'], adam: ['m', 'v'], tp: ['degree', 'codec', 'group'] };

function quantSpec(v: unknown, where: string): string[] {
  return isObject(v) ? unknownKeys(v, QUANT_KEYS, where) : [];
}

function layerCells(v: unknown, where: string): string[] {
  if (!isObject(v)) return [];
  const out = unknownKeys(v, LAYER_KEYS, where);
  for (const k of ['weights', 'gemm_inputs', 'gemm_output_grads']) out.push(...quantSpec(v[k], `${where}.${k}`));
  if (isObject(v.compute)) out.push(...unknownKeys(v.compute, Object.keys(ComputeSchema.shape), `${where}.compute`));
  if (isObject(v.saved)) {
    out.push(...unknownKeys(v.saved, SAVED_KINDS, `${where}.saved`));
    for (const [k, q] of Object.entries(v.saved)) out.push(...quantSpec(q, `${where}.saved.${k}`));
  }
  return out;
}

/** One line per problem (empty when the file's keys are all known and its layers exist). */
export function schemeKeyProblems(raw: Record<string, unknown>, numLayers: number): string[] {
  const out = unknownKeys(raw, Object.keys(SchemeSchema.shape), 'scheme');
  out.push(...layerCells(raw.layer, 'layer'));
  if (isObject(raw.layers)) {
    for (const [k, v] of Object.entries(raw.layers)) {
      const where = `layers[${JSON.stringify(k)}]`;
      if (!/^\d+$/.test(k) || Number(k) >= numLayers) out.push(`${where}: the model has ${numLayers} layer(s), numbered 0 to ${numLayers - 1}`);
      else out.push(...layerCells(v, where));
    }
  }
  for (const [k, keys] of Object.entries(NESTED)) {
    const v = raw[k];
    if (!isObject(v)) continue;
    out.push(...unknownKeys(v, keys, k));
    if (k !== 'tp') for (const sub of keys) out.push(...quantSpec(v[sub], `${k}.${sub}`));
  }
  return out;
}
