/**
 * The scheme editor's logic, pure: the layer × saved-kind grid of storage formats and each layer's
 * GEMM compute formats, edits that keep the scheme valid data, the bits per element a scheme gives
 * the saved activations of a model, and the GEMM path each layer would run on a device.
 */
import type { ModelConfig } from '../engine/model/config';
import { expectedComputePaths, type LayerPaths } from '../engine/model/int8-gemms';
import type { RunPlan } from '../engine/plan/run-plan';
import { resolveTrainingPlan } from '../engine/plan/train-plan';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import {
  type ComputeScheme, FP32, layerScheme, parseScheme, savedSpec, SchemeSchema, type SavedKind, type SavedSpec, type Scheme,
} from '../engine/scheme/scheme';
import { type BitsAndWire, bitsAndWire } from '../engine/train/probe-bits';
import { explainIssues } from './explain';

/** What a (saved-activation) grid cell offers: fp32, bf16, f16, or INT8/INT4 in groups of 128 (round to nearest). */
export const GRID_FORMATS = ['fp32', 'bf16', 'f16', 'int8', 'int4'] as const;
export type GridFormat = (typeof GRID_FORMATS)[number];

export function gridSpec(f: GridFormat): SavedSpec {
  return f === 'fp32' ? FP32 : { format: f, granularity: 'group', group: 128, rounding: 'nearest' };
}

/** A cell's label: the grid formats by name, anything else (fp8, other groups) spelled out. */
export function cellLabel(q: SavedSpec): string {
  if (q.format === 'fp32' || q.format === 'bf16' || q.format === 'f16') return q.format;
  if (q.granularity === 'group' && q.group === 128 && q.rounding === 'nearest' && (q.format === 'int8' || q.format === 'int4')) return q.format;
  return `${q.format}/${q.granularity}${q.granularity === 'group' ? q.group : ''}${q.rounding === 'stochastic' ? '/sr' : ''}`;
}

function renamed(s: Scheme): string {
  return s.name in SCHEME_PRESETS && !s.name.endsWith('-custom') ? `${s.name}-custom`.slice(0, 80) : s.name;
}

/**
 * Sets one cell: layer `l`, or every layer ('all': the default row, dropping per-layer overrides of
 * that kind). An edited preset is renamed `<preset>-custom` so runs do not claim the preset's name.
 */
export function setCell(s: Scheme, l: number | 'all', kind: SavedKind, f: GridFormat): Scheme {
  const spec = gridSpec(f);
  if (l === 'all') {
    const layers: Scheme['layers'] = {};
    for (const [k, o] of Object.entries(s.layers)) {
      const { [kind]: _dropped, ...saved } = o.saved ?? {};
      layers[k] = { ...o, saved };
    }
    return parseScheme({ ...s, name: renamed(s), layer: { ...s.layer, saved: { ...s.layer.saved, [kind]: spec } }, layers });
  }
  const o = s.layers[String(l)] ?? {};
  return parseScheme({ ...s, name: renamed(s), layers: { ...s.layers, [String(l)]: { ...o, saved: { ...(o.saved ?? {}), [kind]: spec } } } });
}

/** The format shown in the 'all layers' row: the layers' common cell, or null when they differ. */
export function commonCell(s: Scheme, layers: number, kind: SavedKind): string | null {
  const labels = new Set(Array.from({ length: layers }, (_, l) => cellLabel(savedSpec(s, l, kind))));
  return labels.size === 1 ? [...labels][0] : null;
}

/** dW's scale blocks the grid offers: tokens per block (powers of two the blocked kernel takes), or 'all' tokens. */
export const DW_BLOCKS = [32, 64, 128, 256, 'all'] as const;

const COMPUTE_FIELDS = ['forward', 'dx', 'dw', 'dw_block', 'grad_rounding', 'attention_qk', 'attention_dp'] as const satisfies readonly (keyof ComputeScheme)[];
const sameCompute = (a: ComputeScheme, b: ComputeScheme) => COMPUTE_FIELDS.every((k) => a[k] === b[k]);

/**
 * Sets compute fields of layer `l`, or of every layer ('all': the default, applied to the layers'
 * own compute settings too, which are dropped where they then equal it). Renames an edited preset as setCell does.
 */
export function setCompute(s: Scheme, l: number | 'all', patch: Partial<ComputeScheme>): Scheme {
  if (l === 'all') {
    const compute = { ...s.layer.compute, ...patch };
    const layers: Scheme['layers'] = {};
    for (const [k, o] of Object.entries(s.layers)) {
      const { compute: own, ...rest } = o;
      const c = own && { ...own, ...patch };
      layers[k] = c && !sameCompute(c, compute) ? { ...rest, compute: c } : rest;
    }
    return parseScheme({ ...s, name: renamed(s), layer: { ...s.layer, compute }, layers });
  }
  const o = s.layers[String(l)] ?? {};
  return parseScheme({ ...s, name: renamed(s), layers: { ...s.layers, [String(l)]: { ...o, compute: { ...layerScheme(s, l).compute, ...patch } } } });
}

/** A compute field's value shared by all `layers` layers (for the 'all' row), or null when they differ. */
export function commonCompute<K extends keyof ComputeScheme>(s: Scheme, layers: number, field: K): ComputeScheme[K] | null {
  const values = new Set(Array.from({ length: layers }, (_, l) => layerScheme(s, l).compute[field]));
  return values.size === 1 ? [...values][0] : null;
}

/**
 * A scheme resolved for a model at batch B and context T by the run's own resolver (engine/plan: a
 * memory budget solved as the run would), once for every view of it; null when the resolver refuses
 * the scheme (computeProblem says why for compute formats).
 */
export function schemePlan(s: Scheme | undefined, cfg: ModelConfig, B: number, T: number): RunPlan | null {
  try {
    return resolveTrainingPlan({ model: cfg, batch: B, seq: T, scheme: s }).model;
  } catch {
    return null;
  }
}

/**
 * The GEMM path each layer of a resolved plan would run on a device with (`tensorCores`) or without
 * the INT8 tensor-core path, as the engine chooses it; null without a plan.
 */
export function gemmPaths(plan: RunPlan | null, tensorCores: boolean): LayerPaths[] | null {
  return plan && expectedComputePaths(plan, tensorCores);
}

export type SavedBits = BitsAndWire['saved'];

/** Bits per element of the saved activations (overall, per layer, per kind): exact storage sizes of a resolved plan; null without one. */
export function savedBits(plan: RunPlan | null): SavedBits | null {
  return plan && bitsAndWire(plan).saved;
}

/** Parses scheme JSON text: the scheme, or the reasons it is invalid. */
export function parseSchemeText(text: string): { scheme: Scheme } | { error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { error: `not JSON: ${(e as Error).message}. Expected a scheme object, e.g. {"name": "mine", "layer": {"saved": {"swiglu": {"format": "int8"}}}} (Export JSON gives a full one)` };
  }
  const r = SchemeSchema.safeParse(raw);
  if (r.success) return { scheme: r.data };
  const good = SCHEME_PRESETS.agoq ?? Object.values(SCHEME_PRESETS)[0];
  return { error: `invalid scheme:\n${explainIssues(r.error.issues, good, 'scheme', raw).map((l) => `  ${l}`).join('\n')}` };
}
