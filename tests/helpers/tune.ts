// Tuner jobs whose candidates have a known cost (TuneOptions.prepare): the real job's candidates' names,
// each checked at once and built in `buildMs` but the first (at once, or in `firstMs` the first time: its pipeline
// compiled once, then cached), all running one given dispatch.
import { expect } from 'vitest';
import type { Dispatch, Runtime } from '../../src/engine/gpu/runtime';
import { TuneCache, tuneEstimate, tuneJobs, type TuneJob } from '../../src/engine/tune';
import type { KernelFamily } from '../../src/engine/tune/store';
import type { PreparedJob } from '../../src/engine/tune/candidate';
import { prepareJob } from '../../src/engine/tune/tuner';

export function knownCostPrepare(d: Dispatch, buildMs: number, onPrepared: (p: PreparedJob) => void = () => {}, firstMs = 0): typeof prepareJob {
  return (rt, j, o) => {
    const p = prepareJob(rt, j, o);
    let firstBuilt = false;
    p.candidates = p.candidates.map((c, k) => ({
      name: c.name,
      check: async () => null,
      build: async () => {
        const ms = k > 0 ? buildMs : firstBuilt ? 0 : firstMs;
        if (k === 0) firstBuilt = true;
        if (ms > 0) await new Promise((res) => setTimeout(res, ms));
        return { dispatches: [d], inner: 1, free: () => {} };
      },
    }));
    onPrepared(p);
    return p;
  };
}

/**
 * Tunes jobs a device has no candidates for (a kernel family it lacks): each is skipped and says why (in the
 * rejection named `candidate`, and as the reason it is unfinished), nothing timed, nothing cached.
 */
export async function expectSkippedTune(rt: Runtime, jobs: TuneJob[], family: KernelFamily, candidate: string, why: RegExp): Promise<void> {
  expect(tuneEstimate(rt, jobs).candidates).toBe(0);
  const cache = new TuneCache();
  const out = await tuneJobs(rt, jobs, cache, { budgetS: 30 });
  expect(out.tuned).toEqual([]);
  expect(out.unfinished.map((u) => u.key)).toEqual(jobs.map((j) => j.key));
  for (const u of out.unfinished) expect(u.why).toMatch(why); // what `npm run tune` prints
  const skipped = out.rejected.filter((r) => r.candidate === candidate);
  expect(skipped.map((r) => r.job)).toEqual(jobs.map((j) => j.key));
  for (const r of skipped) expect(r.why).toMatch(why);
  expect(cache.current(out.adapter, family)).toEqual({});
}
