// The tuner's f16 tensor-core jobs on the test device. SwiftShader has no shader-f16 (nor subgroup
// matrices): every f16 job must say it is skipped and why, time nothing and record nothing.
import { describe, expect, it } from 'vitest';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { trainingTuneJobs } from '../../../src/engine/tune';
import { expectSkippedTune } from '../../helpers/tune';
import { testRuntime } from '../../helpers/gpu';

const rt = await testRuntime();
const noF16 = !rt.gpu.features.shaderF16;

describe('f16 tensor-core layouts in the tuner', () => {
  it.skipIf(!noF16)('without shader-f16 each f16 job is skipped with the reason, nothing timed or cached', async () => {
    const jobs = trainingTuneJobs({ ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 }).filter((j) => j.family === 'f16gemm').slice(0, 3);
    expect(jobs.length).toBe(3);
    await expectSkippedTune(rt, jobs, 'f16gemm', 'f16 tensor-core layouts', /^skipped: this device has no shader-f16/);
  });
});
