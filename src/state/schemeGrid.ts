/**
 * The scheme editor's logic, pure: the layer × saved-kind grid of storage formats, edits that keep
 * the scheme valid data, and the bits per element a scheme gives the saved activations of a model.
 */
import { headDim, type ModelConfig } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { bitsPerElement, FP32, parseScheme, savedSpec, SAVED_KINDS, type QuantSpec, type SavedKind, type Scheme } from '../engine/scheme/scheme';

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

/**
 * Elements of each saved kind in one layer at (B, T), following the model's saved tensors: `o` is
 * stored once, at attn_out (so oproj_input holds none); the final norm's input and the lm_head input
 * belong to the last layer's cells.
 */
export function savedElements(cfg: ModelConfig, B: number, T: number, l: number): Record<SavedKind, [number, number]> {
  const N = B * T;
  const C = cfg.hidden_size;
  const F = cfg.intermediate_size;
  const KVC = cfg.num_key_value_heads * headDim(cfg);
  const last = l === cfg.num_hidden_layers - 1;
  return {
    norm_input: [N * C * (last ? 3 : 2), C],
    qkv_input: [N * C, C],
    attn_qkv: [N * (C + 2 * KVC), C],
    attn_out: [N * C, C],
    oproj_input: [0, C],
    mlp_input: [N * C, C],
    swiglu: [2 * N * F, F],
    down_input: [N * F, F],
    head_input: [last ? N * C : 0, C],
  };
}

export interface SavedBits {
  /** Element-weighted mean bits per element over all saved activations (scales included). */
  overall: number;
  perKind: Record<SavedKind, number | null>;
}

export function savedBits(s: Scheme | undefined, cfg: ModelConfig, B: number, T: number): SavedBits {
  const bits = new Map<SavedKind, [number, number]>(SAVED_KINDS.map((k) => [k, [0, 0]]));
  for (let l = 0; l < cfg.num_hidden_layers; l++) {
    const el = savedElements(cfg, B, T, l);
    for (const k of SAVED_KINDS) {
      const [n, row] = el[k];
      const b = s ? bitsPerElement(savedSpec(s, l, k), row) : 32;
      const acc = bits.get(k)!;
      acc[0] += n * b;
      acc[1] += n;
    }
  }
  let num = 0;
  let den = 0;
  const perKind = {} as Record<SavedKind, number | null>;
  for (const [k, [nb, n]] of bits) {
    perKind[k] = n > 0 ? nb / n : null;
    num += nb;
    den += n;
  }
  return { overall: den > 0 ? num / den : 32, perKind };
}

/** Parses scheme JSON text: the scheme, or the reasons it is invalid. */
export function parseSchemeText(text: string): { scheme: Scheme } | { error: string } {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { error: `not JSON: ${(e as Error).message}` };
  }
  try {
    return { scheme: parseScheme(raw) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}
