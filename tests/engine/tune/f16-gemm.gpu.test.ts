// The tuner's f16 tensor-core jobs on the test device. SwiftShader has no shader-f16 (nor subgroup
// matrices): every f16 job must say it is skipped and why, time nothing and record nothing.
import { describe, expect, it } from 'vitest';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { TuneCache, trainingTuneJobs, tuneEstimate, tuneJobs } from '../../../src/engine/tune';
import { testRuntime } from '../../helpers/gpu';

const rt = await testRuntime();
const noF16 = !rt.gpu.features.shaderF16;

describe('f16 tensor-core layouts in the tuner', () => {
  it.skipIf(!noF16)('without shader-f16 each f16 job is skipped with the reason, nothing timed or cached', async () => {
    const jobs = trainingTuneJobs({ ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 }).filter((j) => j.family === 'f16gemm').slice(0, 3);
    expect(jobs.length).toBe(3);
    expect(tuneEstimate(rt, jobs).candidates).toBe(0);
    const cache = new TuneCache();
    const out = await tuneJobs(rt, jobs, cache, { budgetS: 30 });
    expect(out.tuned).toEqual([]);
    expect(out.unfinished.map((u) => u.key)).toEqual(jobs.map((j) => j.key));
    const skipped = out.rejected.filter((r) => r.candidate === 'f16 tensor-core layouts');
    expect(skipped.map((r) => r.job)).toEqual(jobs.map((j) => j.key));
    for (const r of skipped) expect(r.why).toMatch(/^skipped: this device has no shader-f16/);
    expect(cache.current(out.adapter, 'f16gemm')).toEqual({});
  });
});
