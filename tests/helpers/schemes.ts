/** Test support: schemes derived from the presets. */
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { FP32, parseScheme, SAVED_KINDS, type Scheme } from '../../src/engine/scheme/scheme';

/** The f16 preset's compute (f16 GEMMs and attention, loss scaling) with every saved activation fp32, as before f16 storage. */
export const F16_COMPUTE_FP32_SAVED: Scheme = parseScheme({
  ...SCHEME_PRESETS.f16,
  name: 'f16-fp32-saved',
  layer: { ...SCHEME_PRESETS.f16.layer, saved: Object.fromEntries(SAVED_KINDS.map((k) => [k, FP32])) },
});
