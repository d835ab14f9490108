/**
 * The lone-member reference of a group run: a lab run on this page that trains what one member of
 * the group would train alone — the same model, batch per member, context and optimizer recipe,
 * on the bundled text, with the engine's plain fp32 scheme — so the group's loss against wall-clock
 * time can be drawn beside it. Pure: the panel only draws what this picks.
 */
import { SCHEME_PRESETS } from '../../engine/scheme/presets';
import type { Scheme } from '../../engine/scheme/scheme';
import type { TrainOptions } from '../../engine/train/options';
import { BUNDLED_DATASET, type RunConfig, trainOptionsFor } from '../../worker/protocol';
import { type GroupRunConfig, groupModelName, groupTrainOptions } from './config';
import type { RunState } from '../runs';

/** A scheme's training fields (its name and description say nothing about what it trains). */
function schemeBody(s: Scheme | undefined): string {
  const { name: _n, description: _d, ...body } = s ?? SCHEME_PRESETS.fp32;
  return JSON.stringify(body);
}
const PLAIN = schemeBody(undefined);

/** What must agree between a lone run and one member: the model (the text fixes the vocabulary), the batch, the context and the optimizer's schedule. */
function trainingKey(o: TrainOptions): string {
  const { vocab_size: _v, ...model } = o.model;
  return JSON.stringify({ model, optimizer: o.optimizer, batch: o.batch, seq: o.seq });
}

function loneKey(c: RunConfig): string | null {
  // The group trains the bundled text with its characters, from scratch.
  if (c.dataset !== BUNDLED_DATASET || c.tokenizer || c.data || c.init) return null;
  if (schemeBody(c.scheme) !== PLAIN) return null;
  try {
    return trainingKey(trainOptionsFor(c));
  } catch {
    return null; // a stored run whose config no longer resolves matches nothing
  }
}

/**
 * The lab run that is the lone-member reference of a group run of `c`, or null: among the runs
 * with at least one step that match, the one with the most steps (the later one on a tie).
 */
export function loneReference(c: GroupRunConfig, runs: readonly RunState[]): RunState | null {
  let want: string;
  try {
    // One member alone: the mode only decides what the group exchanges, not what a member trains.
    want = trainingKey(groupTrainOptions({ ...c, mode: 'dp-fp32', diloco: undefined }, 1));
  } catch {
    return null;
  }
  let best: RunState | null = null;
  for (const r of runs) {
    if (r.train.length === 0 || loneKey(r.config) !== want) continue;
    if (!best || r.train.length >= best.train.length) best = r;
  }
  return best;
}

/** What to train in the lab to get a reference for a run of `c` (shown where there is none). */
export function loneReferenceHint(c: GroupRunConfig): string {
  const model = c.model ? `the custom model ${groupModelName(c)} (${c.preset}'s recipe)` : c.preset;
  return `train ${model} alone in the lab with batch ${c.batch}, context ${c.seq}, ${c.steps} steps, the default learning rate, the bundled text and the fp32 scheme to compare`;
}

/** A reference run's loss against its own training time (the lab's elapsed_s), as plot points. */
export function lonePoints(r: RunState): { elapsed_s: number; loss: number }[] {
  return r.train.filter((p) => p.elapsed_s !== undefined).map((p) => ({ elapsed_s: p.elapsed_s!, loss: p.loss }));
}
