/**
 * What a peer group trains: the run configuration every member must share (the data-parallel
 * driver refuses members whose configuration differs, and tensor-parallel shards only fit together
 * when they are cut from the same model), its validation, and the engine options it maps to.
 * Pure: no GPU, no transport; used by the panel (to say what is wrong before Start), by the session
 * protocol (to validate a run announced by a peer) and by the controller.
 */
import { z } from 'zod';
import { type ModelConfig, ModelConfigSchema, PRESET_NAMES, PRESETS } from '../../engine/model/config';
import { modelDims } from '../../engine/model/plan';
import { tpProblem } from '../../engine/model/tp/tp';
import { defaultRunSpec, type RunSpec, schemaProblems, type Strategy, strategyScheme, trainOptionsOf } from '../../engine/run/spec';
import type { Scheme } from '../../engine/scheme/scheme';
import type { TrainOptions } from '../../engine/train/options';
import { type DilocoConfig, resolveDiloco } from '../../parallel/diloco/diloco';

/** Models a group offers: every preset (micro and tiny fit a tab on SwiftShader; small and base want a real GPU), or a custom shape. */
export const GROUP_PRESETS = PRESET_NAMES;
/** Largest group (the collectives' full mesh). */
export const MAX_GROUP_SIZE = 8;

/**
 * 'dp': data parallel, gradients averaged every step, in fp32 or with AGoQ's INT8 codes (verifiable all-reduce).
 * 'tp': tensor parallel (Megatron split of heads and MLP units, degree = group size), the layer
 * all-reduces carried by TACO (ASH + dual-scale FP8) or in fp32.
 * 'diloco': DiLoCo (peers/diloco.ts): H local AdamW steps per member, then the pseudo-gradients'
 * all-reduce (fp32 / INT8 / INT4) and a Nesterov outer step; streaming with fragments > 1.
 * A mode is a name for scheme fields (groupScheme): the exchange is the scheme's grads.wire or tp.codec.
 */
export const GROUP_MODES = {
  'dp-int8': { parallel: 'dp', exchange: 'int8', label: 'data parallel · AGoQ INT8 all-reduce' },
  'dp-fp32': { parallel: 'dp', exchange: 'fp32', label: 'data parallel · fp32 all-reduce' },
  'tp-taco': { parallel: 'tp', exchange: 'taco', label: 'tensor parallel · TACO (FP8) exchange' },
  'tp-fp32': { parallel: 'tp', exchange: 'fp32', label: 'tensor parallel · fp32 exchange' },
  diloco: { parallel: 'dp', exchange: 'diloco', label: 'DiLoCo · H local steps, outer all-reduce' },
} as const;
export type GroupMode = keyof typeof GROUP_MODES;
const MODE_NAMES = Object.keys(GROUP_MODES) as [GroupMode, ...GroupMode[]];

export const GroupRunConfigSchema = z
  .object({
    mode: z.enum(MODE_NAMES),
    preset: z.enum(GROUP_PRESETS),
    /** A custom model (Hugging Face keys) replacing the preset's shape; the preset still gives the recipe (as a lab run's). */
    model: ModelConfigSchema.optional(),
    steps: z.number().int().min(1).max(1_000_000),
    /** Rows per member and step (data parallel: each member's share of the global batch). */
    batch: z.number().int().min(1).max(256),
    seq: z.number().int().min(2).max(1024),
    seed: z.number().int().min(0).max(0xffffffff),
    /** DiLoCo's fields (mode 'diloco'; defaults DEFAULT_DILOCO); checked whole by resolveDiloco. */
    diloco: z
      .object({
        innerSteps: z.number().int().min(1).max(100_000),
        wire: z.enum(['fp32', 'int8', 'int4']),
        fragments: z.number().int().min(1).max(64),
        outerLr: z.number().positive().max(10),
        outerMomentum: z.number().min(0).lt(1),
      })
      .strict()
      .optional(),
  })
  .strict();
export type GroupRunConfig = z.infer<typeof GroupRunConfigSchema>;

export const DEFAULT_GROUP_CONFIG: GroupRunConfig = { mode: 'dp-int8', preset: 'micro', steps: 100, batch: 4, seq: 32, seed: 1337 };

/** DiLoCo's defaults in a group: the paper's outer optimizer, INT8 pseudo-gradients, no streaming. */
export const DEFAULT_DILOCO = { innerSteps: 50, wire: 'int8', fragments: 1, outerLr: 0.7, outerMomentum: 0.9 } as const;

/** The DiLoCo configuration of a run in mode 'diloco' (null for the other modes). */
export function dilocoOf(c: GroupRunConfig): DilocoConfig | null {
  return c.mode === 'diloco' ? { ...DEFAULT_DILOCO, ...c.diloco } : null;
}

export function isTensorParallel(c: Pick<GroupRunConfig, 'mode'>): boolean {
  return GROUP_MODES[c.mode].parallel === 'tp';
}

/** A mode's parallel strategy in a group of `world` (the run spec's strategy field). */
export function groupStrategy(c: GroupRunConfig, world: number): Strategy {
  const m = GROUP_MODES[c.mode];
  if (m.parallel === 'tp') return { kind: 'tp', size: world, codec: m.exchange === 'taco' ? 'taco' : 'fp32' };
  const diloco = dilocoOf(c);
  if (diloco) return { kind: 'diloco', ...diloco };
  return { kind: 'dp', wire: m.exchange === 'int8' ? 'int8' : 'fp32' };
}

/** A group mode's scheme: what the mode names, as the scheme fields the engine and the scheme editor read (the strategy's scheme). */
export function groupScheme(c: GroupRunConfig, world: number): Scheme {
  return strategyScheme(groupStrategy(c, world))!;
}

/** The scheme fields a mode sets, as the scheme editor names them, for a group of `world`. */
export function groupSchemeFields(c: GroupRunConfig, world: number): string {
  const s = groupScheme(c, world);
  if (isTensorParallel(c)) return `tp.degree ${s.tp.degree} · tp.codec ${s.tp.codec}`;
  const d = dilocoOf(c);
  if (d) return `diloco H ${d.innerSteps} · wire ${d.wire} · fragments ${d.fragments} · outer lr ${d.outerLr} · momentum ${d.outerMomentum}`;
  const w = s.grads.wire;
  return w.format === 'fp32' ? 'grads.wire fp32' : `grads.wire ${w.format} · ${w.granularity} ${w.group} · ${w.rounding}`;
}

/**
 * The run spec of a member of a group of `world` (the tokenizer fixes vocab_size later): the panel's
 * form as the spec every entry point builds. No evaluation (the panel plots the training loss of each
 * step's global batch and has no validation curve); periodic checkpoints at the spec's default.
 */
export function groupRunSpec(c: GroupRunConfig, world: number): RunSpec {
  return defaultRunSpec(c.preset, {
    steps: c.steps,
    batch: c.batch,
    seq: c.seq,
    seed: c.seed,
    strategy: groupStrategy(c, world),
    cadence: { evalEvery: 0 },
    model: c.model && { ...c.model, max_position_embeddings: Math.max(c.model.max_position_embeddings, c.seq) },
  });
}

/** The engine's options for a member of a group of `world`: its run spec's. */
export function groupTrainOptions(c: GroupRunConfig, world: number): TrainOptions {
  return trainOptionsOf(groupRunSpec(c, world));
}

/** The model a run trains: its custom shape, else its preset's. */
export function groupModel(c: Pick<GroupRunConfig, 'preset' | 'model'>): ModelConfig {
  return c.model ?? PRESETS[c.preset];
}

/** The model's name in labels and messages: the preset, or "custom W×L". */
export function groupModelName(c: Pick<GroupRunConfig, 'preset' | 'model'>): string {
  return c.model ? `custom ${c.model.hidden_size}×${c.model.num_hidden_layers}` : c.preset;
}

/**
 * Tokens the whole group trains in one step of a group of `world`: data parallel and DiLoCo, each
 * member its own batch of rows; tensor parallel, one batch that the members' shards share.
 */
export function groupStepTokens(c: Pick<GroupRunConfig, 'mode' | 'batch' | 'seq'>, world: number): number {
  return c.batch * c.seq * (isTensorParallel(c) ? 1 : world);
}

/** Why `raw` cannot run on a group of `world` members, in words a user can act on; null when it can. */
export function groupConfigProblem(raw: unknown, world: number): string | null {
  const r = GroupRunConfigSchema.safeParse(raw);
  if (!r.success) return schemaProblems(GroupRunConfigSchema, raw, r.error, 'config').join('; ');
  const c = r.data;
  if (!Number.isInteger(world) || world < 1) return `a group has at least one member (got ${world})`;
  if (world > MAX_GROUP_SIZE) return `a group has at most ${MAX_GROUP_SIZE} members (this one has ${world})`;
  const tp = isTensorParallel(c);
  if (tp && world < 2) return 'tensor parallelism splits the model across members: the group needs at least 2 (share the link first)';
  if (c.diloco && c.mode !== 'diloco') return `diloco: only for the DiLoCo mode (this run is ${c.mode})`;
  const diloco = dilocoOf(c);
  if (diloco) {
    try {
      resolveDiloco(diloco);
    } catch (e) {
      return (e as Error).message;
    }
    const layers = groupModel(c).num_hidden_layers;
    if (diloco.fragments! > layers) return `DiLoCo: ${diloco.fragments} fragments for ${groupModelName(c)}, which has ${layers} layers`;
  }
  let opts: TrainOptions;
  try {
    opts = groupTrainOptions(c, world);
  } catch (e) {
    return (e as Error).message.replace(/\n\s*/g, ' ');
  }
  if (tp) {
    const problem = tpProblem(modelDims(opts.model, c.batch, c.seq), opts.scheme!.tp);
    if (problem) return `${groupModelName(c)} cannot be split across ${world} members: ${problem}`;
  }
  return null;
}

/** A short name for a run of `c`, e.g. "DP AGoQ int8 · micro". */
export function groupRunLabel(c: GroupRunConfig): string {
  const d = dilocoOf(c);
  if (d) return `DiLoCo H${d.innerSteps} ${d.wire}${d.fragments! > 1 ? ` streaming ×${d.fragments}` : ''} · ${groupModelName(c)}`;
  const m = GROUP_MODES[c.mode];
  const exchange = m.exchange === 'int8' ? 'AGoQ int8' : m.exchange === 'taco' ? 'TACO' : 'fp32';
  return `${m.parallel.toUpperCase()} ${exchange} · ${groupModelName(c)}`;
}
