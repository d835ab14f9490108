// tuneForRun on SwiftShader with candidates of a known cost and a stand-in step (a CPU adapter's own
// times say nothing): the whole tune, the step check's four timings included, stays within its budget,
// the timings after the tune priced by the first one less its pipeline compiling.
import { describe, expect, it } from 'vitest';
import { fill } from '../engine/kernels/elementwise/elementwise';
import { TuneCache, trainingTuneJobs } from '../engine/tune';
import { tunedPicks } from '../engine/tune/store';
import { defaultTrainOptions } from '../engine/train/options';
import { attentionTestRuntime } from '../../tests/helpers/gpu';
import { knownCostPrepare } from '../../tests/helpers/tune';
import { tuneForRun } from './tune-check';

const sleep = (ms: number) => new Promise((res) => setTimeout(res, ms));

describe('tuneForRun', () => {
  it('sets the step check\'s share aside from the budget: before, the tune, tuned, before, tuned; then nothing pending, nothing timed', async () => {
    const rt = await attentionTestRuntime();
    const opts = defaultTrainOptions('micro', { model: { vocab_size: 65 } });
    const job0 = trainingTuneJobs(opts)[0];
    const out = rt.createBuffer('workspace', 'tune-run.fill', 4096);
    const d = fill(rt, { label: 'tune-run', out, value: 1, n: 1024 });
    const steps: string[] = [];
    // The first step timing 0.3 s, 0.2 of it compiling pipelines (which the later ones reuse): 0.3 s set aside for the three after.
    let timings = 0;
    const timer = {
      time: async () => {
        const first = timings++ === 0;
        await sleep(first ? 300 : 100);
        if (first) rt.pipelines.createMs += 200;
        steps.push(tunedPicks(rt.device, job0.family, job0.key) ? 'tuned' : 'before');
        return 10;
      },
    };
    const cache = new TuneCache();
    const budgetS = 3;
    const t0 = performance.now();
    const run = await tuneForRun(rt, 'micro', opts, cache, {
      budgetS, since: t0, settleMs: 0, maxGemmCandidates: 4,
      // The jobs' real candidates' names, each checked at once; all but the first build in 0.2 s.
      prepare: knownCostPrepare(d, 200),
    }, timer);
    const wall = (performance.now() - t0) / 1000;
    expect(steps).toEqual(['before', 'tuned', 'before', 'tuned']);
    expect(run.outcome.tuned.length).toBeGreaterThan(0);
    expect(run.stepCheck).toEqual({ tunedMs: 10, beforeMs: 10, kept: true });
    expect(run.firstTiming).toMatchObject({ stepMs: 10, compileS: 0.2 });
    expect(run.reserveS).toBeCloseTo(0.3, 1);
    expect(run.tunerBudgetS).toBeGreaterThan(budgetS - 0.3 - 0.3 - 0.5);
    expect(run.tunerBudgetS).toBeLessThanOrEqual(budgetS - 0.3 - 0.3);
    expect(run.wallS).toBeCloseTo(wall, 1);
    expect(wall).toBeLessThan(budgetS + 0.5); // one build in flight past the tuner's end
    // Everything is in the cache now: no step timing, no tune, no check.
    steps.length = 0;
    const again = await tuneForRun(rt, 'micro', opts, cache, { budgetS }, timer);
    expect(steps).toEqual([]);
    expect(again.outcome.tuned).toEqual([]);
    expect(again.stepCheck).toBeUndefined();
    rt.mem.free(out);
  }, 60_000);
});
