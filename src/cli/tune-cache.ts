/**
 * The tuning cache on disk (engine/tune/cache.ts's JSON): `$LAB_TUNE_CACHE`, else
 * `$XDG_CACHE_HOME/webgpu-quant-lab/tune.json`, else `~/.cache/webgpu-quant-lab/tune.json`; and the
 * tune a `train --tune` / `peer --tune` run does before it builds its model.
 */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import path from 'node:path';
import type { Runtime } from '../engine/gpu/runtime';
import type { PresetName } from '../engine/model/config';
import type { TrainOptions } from '../engine/train/options';
import { stepCheckWords, tuneForRun } from '../lab/tune-check';
import type { Runtime as Rt } from '../engine/gpu/runtime';
import {
  adapterKeyOf, adoptSharedTable, applySharedForTraining, KERNEL_FAMILIES, type KernelFamily, pendingTune, setShippedSeeds, resetRunChoices, shareableTable,
  type SharedTableOutcome, type SharedTuneTable, TuneCache, TuneCacheError, type TuningStatus,
} from '../engine/tune';
import { errnoWords, UsageError } from './common';

/** The lab's folder in the user's cache: `$XDG_CACHE_HOME/webgpu-quant-lab`, else `~/.cache/webgpu-quant-lab` (the Hub's downloads live there too). */
export function labCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base = env.XDG_CACHE_HOME && path.isAbsolute(env.XDG_CACHE_HOME) ? env.XDG_CACHE_HOME : path.join(homedir(), '.cache');
  return path.join(base, 'webgpu-quant-lab');
}

/** Where the cache file lives (see the module comment). */
export function tuneCachePath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LAB_TUNE_CACHE) return path.resolve(env.LAB_TUNE_CACHE);
  return path.join(labCacheDir(env), 'tune.json');
}

function readCache(file: string, what: string, hint = ''): TuneCache {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError(`${what}: ${errnoWords(e)}`);
  }
  try {
    return TuneCache.parse(text, what);
  } catch (e) {
    if (e instanceof TuneCacheError) throw new UsageError(`${e.message}${hint}`);
    throw e;
  }
}

/** Reads the user's tuning cache file: empty when absent; a malformed one is a UsageError naming it. */
export function readTuneCacheFile(file: string): TuneCache {
  if (!existsSync(file)) return new TuneCache();
  return readCache(file, `tuning cache ${file}`, ' (delete it to start a new cache, or point LAB_TUNE_CACHE elsewhere)');
}

/** Reads a file to import: it must exist and be a tuning cache (a malformed or foreign file is refused). */
export function readImportFile(file: string): TuneCache {
  if (!existsSync(file)) throw new UsageError(`--import ${file}: no such file`);
  return readCache(file, `--import ${file}`);
}

/** Writes the cache atomically (a temporary file renamed over it), creating its folder. */
export function writeTuneCacheFile(file: string, cache: TuneCache): void {
  mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, cache.serialize());
  renameSync(tmp, file);
}

/** What run.json records of a run's tuning. */
export interface RunTuning {
  /** tuned / partly tuned / defaults, and whether a shipped table was used (TuningStatus). */
  status: TuningStatus['status'];
  label: string;
  shipped_table: boolean;
  counts: TuningStatus['counts'];
  /** Kernel choices whose picks a group member shared (checked on this device first), and those members. */
  shared?: { choices: number; by: string[] };
  /** With --tune: what the tune before the run did. */
  tune?: { cache: string; tuned: number; cached: number; unfinished: number; seconds: number; budget_s: number };
}

export function runTuning(status: TuningStatus, tune?: RunTuning['tune']): RunTuning {
  return {
    status: status.status, label: status.label, shipped_table: status.shippedTable, counts: status.counts,
    ...(status.shared ? { shared: { choices: status.shared, by: status.sharedBy } } : {}), ...(tune ? { tune } : {}),
  };
}

/**
 * The cache a run reads, before the GPU starts. With --tune a malformed cache file is refused (exit 2);
 * without, the run warns and goes on with the shipped tables and the heuristic.
 */
export function runTuneCache(tune: boolean): TuneCache {
  // LAB_SHIPPED_SEEDS=0: no architecture seeds, so an untabled GPU measures the heuristic alone.
  if (process.env.LAB_SHIPPED_SEEDS === '0') setShippedSeeds(false);
  try {
    return readTuneCacheFile(tuneCachePath());
  } catch (e) {
    if (tune || !(e instanceof UsageError)) throw e;
    console.error(`warning: ${e.message}; running on the default kernel choices`);
    return new TuneCache();
  }
}

/**
 * Before a run builds its model: with `tune` (--tune), tunes what this run needs and the cache
 * lacks on this device within the budget and saves the cache; then the cache's entries for this
 * adapter apply (the picks stay on the device for the model built next) and the device's record of
 * choices starts afresh, so runTuningStatus(rt) after the build describes this run's model.
 */
export async function prepareRunKernels(rt: Runtime, opts: Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme'>, cache: TuneCache,
  tune: { budgetS: number; preset?: PresetName } | null, log: (line: string) => void = (l) => console.error(l)): Promise<RunTuning['tune'] | undefined> {
  let summary: RunTuning['tune'];
  if (tune) {
    const { budgetS } = tune;
    const t0 = performance.now();
    const file = tuneCachePath();
    const pending = pendingTune(rt, opts, cache, { budgetS });
    log(`tune: ${pending.jobs.length} kernel choices to tune on this GPU (${pending.candidates} candidates, up to ~${Math.ceil(pending.seconds)} s; cache ${file})`);
    let last = 0;
    // The tune is kept only if the run's step is not slower with it (lab/tune-check.ts), where a preset's synthetic step stands for the run.
    const run = await tuneForRun(rt, tune.preset, opts, cache, {
      budgetS, since: t0, jobs: pending.all,
      onProgress: (p) => {
        if (p.phase === 'done' || performance.now() - last < 2000) return;
        last = performance.now();
        log(`tune: ${p.jobsDone}/${p.jobs} ${p.job}${p.candidate ? ` ${p.candidate}` : ''} (${p.elapsedS.toFixed(0)} s, ~${Math.ceil(p.remainingS)} s left)`);
      },
    });
    const { outcome } = run;
    if (run.stepCheck) log(`tune: ${stepCheckWords(run.stepCheck)}`);
    if (outcome.tuned.length) writeTuneCacheFile(file, cache);
    log(`tune: ${outcome.tuned.length} tuned, ${outcome.cached.length} from the cache, ${outcome.unfinished.length} unfinished`
      + `${outcome.outOfBudget ? ` (the ${budgetS} s budget ran out)` : ''} in ${run.wallS.toFixed(1)} s`);
    summary = { cache: file, tuned: outcome.tuned.length, cached: outcome.cached.length, unfinished: outcome.unfinished.length, seconds: Number(run.wallS.toFixed(2)), budget_s: budgetS };
  }
  cache.applyTo(rt.device, adapterKeyOf(rt.gpu.adapterInfo));
  // Picks a group member shared are checked on this device before this run's model uses them.
  const shared = await applySharedForTraining(rt, opts, cache);
  if (shared.applied.length) log(`tune: ${shared.applied.length} kernel choices from picks shared by ${[...new Set(shared.applied.map((a) => a.from))].join(', ')} (checked on this GPU)`);
  for (const f of shared.failed) log(`tune: the pick for ${f.key} shared by ${f.from} failed its check on this GPU and is dropped: ${f.why}`);
  if (shared.failed.length) keepSharedChange(cache, tuneCachePath(), log);
  resetRunChoices(rt);
  return summary;
}

/** Writes the cache after a change to its shared entries; a file that is malformed now is left alone (said). */
function keepSharedChange(cache: TuneCache, file: string, log: (line: string) => void, added: { family: KernelFamily; key: string }[] = []): void {
  try {
    // The file as it is now (a tune in another process may have written it), with the change applied.
    const disk = readTuneCacheFile(file);
    for (const { adapter: a } of cache.data.adapters) {
      // Shared entries this run dropped (failed their check here) go from the file too; those it took are added.
      for (const f of KERNEL_FAMILIES) {
        for (const [k, e] of Object.entries(disk.current(a, f))) if (e.sharedBy !== undefined && !cache.get(a, f, k)) disk.drop(a, f, k);
      }
      for (const { family, key } of added) {
        const e = cache.get(a, family, key);
        if (e?.sharedBy !== undefined) disk.putShared(a, family, key, { ...e, sharedBy: e.sharedBy });
      }
    }
    writeTuneCacheFile(file, disk);
  } catch (e) {
    log(`tune: the tuning cache ${file} was not updated: ${(e as Error).message}`);
  }
}

/**
 * The group side of a member's tuning (parallel/dp/tune-share.ts): its own table for this GPU, and
 * a peer's table taken into the run's cache (judged entry by entry) and the cache file, for the
 * next run on this GPU, which checks each shared pick on the device before it uses it.
 */
export function groupTuneShare(rt: Rt, cache: TuneCache, log: (line: string) => void = (l) => console.error(l)): {
  table: SharedTuneTable; accept(from: string, t: SharedTuneTable): SharedTableOutcome;
} {
  return {
    table: shareableTable(cache, adapterKeyOf(rt.gpu.adapterInfo)),
    accept: (from, t) => {
      const out = adoptSharedTable(rt, cache, t, from);
      const added = out.added.map((s) => ({ family: s.slice(0, s.indexOf(' ')) as KernelFamily, key: s.slice(s.indexOf(' ') + 1) }));
      if (added.length) keepSharedChange(cache, tuneCachePath(), log, added);
      return out;
    },
  };
}
