/**
 * Tuning in the product (issue 36): the kernel choices a run makes, timed on the user's GPU and
 * kept per adapter and kernel code. Entry points: `npm run tune` and `train --tune` (cli/tune.ts),
 * the page's "Tune this GPU" (state/tune-store.ts). The kernels read the picks from ./store.ts.
 */
import type { Runtime } from '../gpu/runtime';
import { resolveTrainingPlan } from '../plan/train-plan';
import type { TrainOptions } from '../train/options';
import { adapterKeyOf } from './adapter';
import type { TuneCache } from './cache';
import { planTuneJobs, type TuneJob } from './jobs';
import { madeChoices, resetChoices, tuningStatus, type TuningStatus } from './store';
import { applySharedPicks, hasSharedEntries, type SharedPicksOutcome } from './shared';
import { missingJobs, type TuneOptions, tuneEstimate } from './tuner';

export { adapterFamily, adapterId, seedFamily, setShippedSeeds, type AdapterKey, adapterKeyOf, adapterLabel } from './adapter';
export { emptyTuneCache, parseTuneCache, TuneCache, TuneCacheError, type TuneCacheData, type TuneEntry } from './cache';
export { codeHash, codeHashes } from './families';
export { planTuneJobs, type TuneJob } from './jobs';
export { LAB_RUN_SHAPE, labRunOptions } from './lab-run';
export { type ChoiceSource, KERNEL_FAMILIES, type KernelFamily, madeChoices, resetChoices, tuningStatus, type TuningStatus } from './store';
export { attentionCandidates } from './attention';
export { matmulCandidateProblem, matmulCandidates } from './gemm';
export {
  adapterDigest, adoptSharedTable, applySharedPicks, MAX_SHARED_PICKS, shareableTable, sharedEntryProblem, type SharedPicksOutcome,
  type SharedTableOutcome, type SharedTuneEntry, type SharedTuneFamily, type SharedTuneTable,
} from './shared';
export { missingJobs, type TunedJob, tunedJobWords, type TuneOptions, type TuneOutcome, type TuneProgress, tuneEstimate, tuneJobs } from './tuner';

/** The tuning jobs of a training run (its model, batch, context and scheme). */
export function trainingTuneJobs(opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>): TuneJob[] {
  return planTuneJobs(resolveTrainingPlan(opts).model);
}

/**
 * What a tune of this run would still do on this device: jobs the cache lacks, their candidates and a first estimate
 * of the seconds; `all`, the run's jobs (for the tune that follows: lab/tune-check.ts tuneForRun's `jobs`).
 */
export function pendingTune(rt: Runtime, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, cache: TuneCache, o: TuneOptions = {}) {
  const all = trainingTuneJobs(opts);
  const jobs = missingJobs(all, cache, adapterKeyOf(rt.gpu.adapterInfo), o.force);
  return { all, jobs, ...tuneEstimate(rt, jobs, o) };
}

/** The cache's entries shared by group members for this run's choices, checked on the device and applied where they pass (shared.ts). */
export async function applySharedForTraining(rt: Runtime, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, cache: TuneCache): Promise<SharedPicksOutcome> {
  // Most caches hold none: then the run's jobs (a plan of its own) are not worked out at all.
  if (!hasSharedEntries(cache, adapterKeyOf(rt.gpu.adapterInfo))) return { applied: [], failed: [] };
  return applySharedPicks(rt, cache, trainingTuneJobs(opts));
}

/** How the choices made on this device since resetChoices were sourced (tuned, partly, defaults; shipped table). */
export function runTuningStatus(rt: Runtime): TuningStatus {
  return tuningStatus(madeChoices(rt.device));
}

/** Starts a fresh record of this device's choices (call before building a model whose status is wanted). */
export function resetRunChoices(rt: Runtime): void {
  resetChoices(rt.device);
}
