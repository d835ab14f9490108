/**
 * The lab page's run of a preset, as far as tuning sees it (model, batch, context, scheme): a leaf
 * the lab form's defaults (worker/protocol.ts) and the bench page's "Tune this GPU" both read, so
 * the shapes tuned are the shapes a lab run trains.
 */
import type { PresetName } from '../model/config';
import { defaultRunSpec, trainOptionsOf } from '../run/spec';
import type { Scheme } from '../scheme/scheme';
import type { TrainOptions } from '../train/options';

/**
 * The lab page's batch and context unless its form is changed (worker/protocol.ts DEFAULT_RUN_CONFIG
 * takes them from here): what "Tune this GPU" tunes by default, so a lab run finds all its choices.
 */
export const LAB_RUN_SHAPE = { batch: 8, seq: 32 } as const;

/** The training options of the lab page's run of a preset at this batch and context and scheme (the spec its form makes: protocol.ts runSpecOfConfig). */
export function labRunOptions(preset: PresetName, batch: number = LAB_RUN_SHAPE.batch, seq: number = LAB_RUN_SHAPE.seq, scheme?: Scheme): TrainOptions {
  return trainOptionsOf(defaultRunSpec(preset, { batch, seq, scheme }));
}
