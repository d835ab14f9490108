// Tuner jobs whose candidates have a known cost (TuneOptions.prepare): the real job's candidates' names,
// each checked at once and built in `buildMs` but the first, all running one given dispatch.
import type { Dispatch } from '../../src/engine/gpu/runtime';
import type { PreparedJob } from '../../src/engine/tune/candidate';
import { prepareJob } from '../../src/engine/tune/tuner';

export function knownCostPrepare(d: Dispatch, buildMs: number, onPrepared: (p: PreparedJob) => void = () => {}): typeof prepareJob {
  return (rt, j, o) => {
    const p = prepareJob(rt, j, o);
    p.candidates = p.candidates.map((c, k) => ({
      name: c.name,
      check: async () => null,
      build: async () => {
        if (k > 0) await new Promise((res) => setTimeout(res, buildMs));
        return { dispatches: [d], inner: 1, free: () => {} };
      },
    }));
    onPrepared(p);
    return p;
  };
}
