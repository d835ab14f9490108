// Tuner jobs whose candidates have a known cost (TuneOptions.prepare): the real job's candidates' names,
// each checked at once and built in `buildMs` but the first (at once, or in `firstMs` the first time: its pipeline
// compiled once, then cached), all running one given dispatch.
import type { Dispatch } from '../../src/engine/gpu/runtime';
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
