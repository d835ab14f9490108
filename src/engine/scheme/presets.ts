/**
 * Scheme presets. Only what the engine executes is offered: a scheme that asks for a feature the
 * engine does not implement yet is rejected by `unsupportedFeatures` (see docs/schemes.md).
 */
import { FP32, parseScheme, type QuantSpec, type SavedKind, type Scheme } from './scheme';

const q = (format: QuantSpec['format'], granularity: QuantSpec['granularity'] = 'group', group = 128): QuantSpec => ({
  format, granularity, group, rounding: 'nearest',
});

/** AGoQ's layer-type rule: attention activations stay full precision, every other saved tensor INT4. */
const AGOQ_SAVED: Partial<Record<SavedKind, QuantSpec>> = {
  norm_input: q('int4'),
  qkv_input: q('int4'),
  attn_qkv: FP32,
  attn_out: FP32,
  oproj_input: q('int4'),
  mlp_input: q('int4'),
  swiglu: q('int4'),
  down_input: q('int4'),
  head_input: q('int4'),
};

export const SCHEME_PRESETS: Record<string, Scheme> = {
  fp32: parseScheme({ name: 'fp32', description: 'The engine as is: everything fp32.' }),
  agoq: parseScheme({
    name: 'agoq',
    description: 'AGoQ layer-aware activation storage: INT4 group-128 for every non-attention saved activation, attention kept fp32.',
    layer: { saved: AGOQ_SAVED },
  }),
  taco: parseScheme({
    name: 'taco',
    description: 'TACO: the tensor-parallel all-reduces of every layer (simulated TP degree 4) carry ASH + dual-scale FP8 (E4M3, groups of 128).',
    tp: { degree: 4, codec: 'taco', group: 128 },
  }),
  'tp4-fp32': parseScheme({
    name: 'tp4-fp32',
    description: 'Simulated TP degree 4 with uncompressed fp32 all-reduces (the baseline for taco).',
    tp: { degree: 4, codec: 'fp32', group: 128 },
  }),
};

export function schemePreset(name: string): Scheme {
  const s = SCHEME_PRESETS[name];
  if (!s) throw new Error(`unknown scheme '${name}' (presets: ${Object.keys(SCHEME_PRESETS).join(', ')}, or a JSON file)`);
  return s;
}
