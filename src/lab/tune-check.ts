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
import { adapterKeyOf, missingJobs, TuneCache, type TuneCacheData, type TuneJob, trainingTuneJobs, tuneJobs, type TuneOptions, type TuneOutcome } from '../engine/tune';
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

/** Clears the device's tuned picks and applies `c`'s for this adapter. */
function applyPicks(rt: Runtime, c: TuneCache): void {
  clearTuned(rt.device);
  c.applyTo(rt.device, adapterKeyOf(rt.gpu.adapterInfo));
}

/**
 * Times `timeStep` with the cache's picks applied, then with `before`'s (the cache's data before the
 * tune), `rounds` times alternately; keeps the tune when its best is within `tolerance` of before's
 * best, else puts the cache back to `before`. Either way the device ends with the kept cache's picks.
 * `beforeMs0`: a time of before's step taken already (tuneForRun's, ahead of the tune): it is the
 * first round's before, so the rounds run tuned, before, …, tuned.
 */
export async function checkTuneByStep(rt: Runtime, cache: TuneCache, before: TuneCacheData, timeStep: () => Promise<number>, rounds = 2, tolerance = 0.01,
  beforeMs0?: number): Promise<TuneStepCheck> {
  const prior = new TuneCache(structuredClone(before));
  let tunedMs = Infinity;
  let beforeMs = beforeMs0 ?? Infinity;
  for (let r = 0; r < rounds; r++) {
    applyPicks(rt, cache);
    tunedMs = Math.min(tunedMs, await timeStep());
    if (beforeMs0 !== undefined && r === rounds - 1) break;
    applyPicks(rt, prior);
    beforeMs = Math.min(beforeMs, await timeStep());
  }
  const kept = tunedMs <= beforeMs * (1 + tolerance);
  if (!kept) cache.data = structuredClone(before);
  applyPicks(rt, cache);
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
  return { time: async () => (await benchStep(rt, { preset, scheme, batch: opts.batch, seq: opts.seq, warmup: 2, reps, gpuTime: false })).msPerStep };
}

/** What the step check did: its times and decision, or why it did not run. */
export type TuneStepOutcome = TuneStepCheck | { skip: string };

/** A tune of a run within a budget, its step check included (tuneForRun). */
export interface RunTuneOptions extends Omit<TuneOptions, 'budgetS'> {
  /** Seconds for the whole tune: the step check's timings, then the tuner's candidates in what is left. */
  budgetS: number;
  /** performance.now() when the budget began (the CLI: 0, the process's start); default this call. */
  since?: number;
  /** Time the run's step with and without the tune and keep it only if not slower (default true). */
  stepCheck?: boolean;
  /** Called once the step before the tune is timed, with RunTune's firstTiming and reserveS (a CLI's log line). */
  onFirstTiming?: (f: NonNullable<RunTune['firstTiming']>, reserveS: number) => void;
  /** The run's jobs where the caller planned them already (engine/tune pendingTune's `all`); default planned here. */
  jobs?: readonly TuneJob[];
}

export interface RunTune {
  outcome: TuneOutcome;
  /** The step check, where something was tuned and it was asked for (or why it was skipped). */
  stepCheck?: TuneStepOutcome;
  /** The seconds the tuner was given: the budget less what came before it and the step check's share. */
  tunerBudgetS: number;
  /** Seconds from `since` to the end, step check included. */
  wallS: number;
  /** The step with the picks from before the tune, timed ahead of it: its ms a step, the seconds the timing took, those spent compiling pipelines. */
  firstTiming?: { stepMs: number; seconds: number; compileS: number };
  /** Seconds set aside from the budget for the check's timings after the tune. */
  reserveS: number;
}

/** Rounds of the step check (tuned, before); tuneForRun times the first round's before ahead of the tune. */
const CHECK_ROUNDS = 2;

/**
 * Tunes what the run needs and the cache lacks (engine/tune tuneJobs over trainingTuneJobs) and checks the tune in the
 * run's step, all within `budgetS` from `since`. The step with the picks from before the tune is timed
 * first: that time is the check's first before, and what it took less its pipeline compiling (the later
 * builds reuse its pipelines) prices the timings after the tune (tuned, before, tuned), which are set aside from the
 * tuner's share. In s31c1 a 85 s tune of base on an H100 took 115 s with its step check after it.
 */
export async function tuneForRun(rt: Runtime, preset: PresetName | undefined, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, cache: TuneCache,
  o: RunTuneOptions, timer = preset && o.stepCheck !== false ? runStepTimer(rt, preset, opts) : undefined): Promise<RunTune> {
  const t0 = o.since ?? performance.now();
  const since = () => (performance.now() - t0) / 1000;
  const before = structuredClone(cache.toJSON());
  const jobs = o.jobs ?? trainingTuneJobs(opts);
  let beforeMs0: number | undefined;
  let first: RunTune['firstTiming'];
  let reserveS = 0;
  if (timer && 'time' in timer && missingJobs(jobs, cache, adapterKeyOf(rt.gpu.adapterInfo), o.force).length > 0) {
    applyPicks(rt, new TuneCache(structuredClone(before)));
    const c0 = performance.now();
    const k0 = rt.pipelines.createMs;
    beforeMs0 = await timer.time();
    first = { stepMs: beforeMs0, seconds: (performance.now() - c0) / 1000, compileS: (rt.pipelines.createMs - k0) / 1000 };
    // The timings after the tune build the same step, its pipelines cached: each is priced without this one's compiling.
    reserveS = (2 * CHECK_ROUNDS - 1) * Math.max(0, first.seconds - first.compileS);
    o.onFirstTiming?.(first, reserveS);
  }
  const tunerBudgetS = Math.max(0, Math.floor((o.budgetS - since() - reserveS) * 10) / 10);
  const outcome = await tuneJobs(rt, jobs, cache, { ...o, budgetS: tunerBudgetS });
  let stepCheck: TuneStepOutcome | undefined;
  if (timer && outcome.tuned.length && !outcome.cancelled) {
    stepCheck = 'skip' in timer ? timer : await checkTuneByStep(rt, cache, before, timer.time, CHECK_ROUNDS, 0.01, beforeMs0);
  }
  return { outcome, stepCheck, tunerBudgetS, wallS: since(), firstTiming: first, reserveS };
}

/** The step check in words (the CLIs' log line, the page's done line). */
export function stepCheckWords(c: TuneStepOutcome): string {
  if ('skip' in c) return `step check skipped: ${c.skip}`;
  return `step check: ${c.tunedMs.toFixed(2)} ms a step tuned, ${c.beforeMs.toFixed(2)} ms before the tune: `
    + (c.kept ? 'kept' : 'not faster, so this tune is dropped (the cache is as it was)');
}
