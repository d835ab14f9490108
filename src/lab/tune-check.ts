/**
 * A tune proven in the run's own step (issue 36): the training step timed with this tune's picks and
 * with the picks the device had before it, alternately; the tune's entries are kept only when its step
 * is not slower. On the H100 every base f16 tune of s28 picked kernels that each timed faster alone and
 * made the step 4–9 % slower together (the GPU's clock moving under the tune, and what a kernel meets
 * in a step that it does not alone).
 */
import type { Runtime } from '../engine/gpu/runtime';
import { PRESETS, type PresetName } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import type { Scheme } from '../engine/scheme/scheme';
import type { TrainOptions } from '../engine/train/options';
import { adapterKeyOf, TuneCache, type TuneCacheData } from '../engine/tune';
import { clearTuned } from '../engine/tune/store';
import { isCpuAdapter } from '../engine/tune/tuner';
import { benchStep, SYNTHETIC_VOCAB } from './step';

export interface TuneStepCheck {
  /** Median ms of the step with this tune's picks, and with the picks from before it (best of the rounds). */
  tunedMs: number;
  beforeMs: number;
  /** The tune's entries stay in the cache and on the device; else the cache is as before the tune. */
  kept: boolean;
}

/**
 * Times `timeStep` with the cache's picks applied, then with `before`'s (the cache's data before the
 * tune), `rounds` times alternately; keeps the tune when its best is within `tolerance` of before's
 * best, else puts the cache back to `before`. Either way the device ends with the kept cache's picks.
 */
export async function checkTuneByStep(rt: Runtime, cache: TuneCache, before: TuneCacheData, timeStep: () => Promise<number>, rounds = 2, tolerance = 0.01): Promise<TuneStepCheck> {
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  const prior = new TuneCache(structuredClone(before));
  const apply = (c: TuneCache) => {
    clearTuned(rt.device);
    c.applyTo(rt.device, adapter);
  };
  let tunedMs = Infinity;
  let beforeMs = Infinity;
  for (let r = 0; r < rounds; r++) {
    apply(cache);
    tunedMs = Math.min(tunedMs, await timeStep());
    apply(prior);
    beforeMs = Math.min(beforeMs, await timeStep());
  }
  const kept = tunedMs <= beforeMs * (1 + tolerance);
  if (!kept) cache.data = structuredClone(before);
  apply(cache);
  return { tunedMs, beforeMs, kept };
}

/**
 * The run's step as benchStep times it (a synthetic trainer of the preset at the run's batch, context and
 * scheme), or why it cannot stand for the run: a CPU adapter (no clock to move, and times that say nothing),
 * or a model that is not the preset's shape over the synthetic vocabulary.
 */
export function runStepTimer(rt: Runtime, preset: PresetName, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, reps = 5):
  { time: () => Promise<number> } | { skip: string } {
  if (isCpuAdapter(adapterKeyOf(rt.gpu.adapterInfo))) return { skip: 'a CPU adapter (its step times say nothing about a GPU)' };
  const p = PRESETS[preset];
  const m = opts.model;
  const same = m.hidden_size === p.hidden_size && m.intermediate_size === p.intermediate_size && m.num_hidden_layers === p.num_hidden_layers
    && m.num_attention_heads === p.num_attention_heads && m.num_key_value_heads === p.num_key_value_heads && m.vocab_size === SYNTHETIC_VOCAB;
  if (!same) return { skip: `the model is not ${preset}'s shape over a ${SYNTHETIC_VOCAB}-symbol vocabulary (the step check's synthetic run)` };
  const scheme: Scheme = opts.scheme ?? SCHEME_PRESETS.fp32;
  return { time: async () => (await benchStep(rt, { preset, scheme, batch: opts.batch, seq: opts.seq, warmup: 2, reps })).msPerStep };
}

/** What the step check did: its times and decision, or why it did not run. */
export type TuneStepOutcome = TuneStepCheck | { skip: string };

/** After a tune (`before`: the cache's data before it): the run's step checked (runStepTimer, then checkTuneByStep), or why not. */
export async function checkTuneInRunStep(rt: Runtime, preset: PresetName, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, cache: TuneCache,
  before: TuneCacheData): Promise<TuneStepOutcome> {
  const timer = runStepTimer(rt, preset, opts);
  return 'skip' in timer ? timer : checkTuneByStep(rt, cache, before, timer.time);
}

/** The step check in words (the CLIs' log line, the page's done line). */
export function stepCheckWords(c: TuneStepOutcome): string {
  if ('skip' in c) return `step check skipped: ${c.skip}`;
  return `step check: ${c.tunedMs.toFixed(2)} ms a step tuned, ${c.beforeMs.toFixed(2)} ms before the tune: `
    + (c.kept ? 'kept' : 'not faster, so this tune is dropped (the cache is as it was)');
}
