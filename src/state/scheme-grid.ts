/**
 * The scheme editor's logic, pure: the layer × saved-kind grid of storage formats, edits that keep
 * the scheme valid data, and the bits per element a scheme gives the saved activations of a model.
 */
import type { ModelConfig } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { FP32, parseScheme, savedSpec, SchemeSchema, type QuantSpec, type SavedKind, type Scheme } from '../engine/scheme/scheme';
import { type BitsAndWire, bitsAndWire } from '../engine/train/probe-bits';
import { explainIssues } from './explain';

/** What a grid cell offers: fp32, or INT8/INT4 in groups of 128 (round to nearest). */
export const GRID_FORMATS = ['fp32', 'int8', 'int4'] as const;
export type GridFormat = (typeof GRID_FORMATS)[number];

export function gridSpec(f: GridFormat): QuantSpec {
  return f === 'fp32' ? FP32 : { format: f, granularity: 'group', group: 128, rounding: 'nearest' };
}

/** A cell's label: the grid formats by name, anything else (fp8, other groups) spelled out. */
export function cellLabel(q: QuantSpec): string {
  if (q.format === 'fp32') return 'fp32';
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

export type SavedBits = BitsAndWire['saved'];

/** Bits per element of the saved activations (overall, per layer, per kind): exact storage sizes from the engine's plan. */
export function savedBits(s: Scheme | undefined, cfg: ModelConfig, B: number, T: number): SavedBits {
  return bitsAndWire(cfg, B, T, s).saved;
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
