// The tuner's fp32 GEMM jobs run as the step runs them: a shape's calls that write C and those that
// accumulate into it (o_proj's forward onto the residual, k's and v's dX; down_proj's forward and up's dX write
// dq and add it: linear-gemms.ts fp32Accumulate) are
// counted per job, and a candidate is checked and timed in both forms, as often as the step runs each.
import { describe, expect, it } from 'vitest';
import { resolveTrainingPlan } from '../../../src/engine/plan/train-plan';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { trainingTuneJobs } from '../../../src/engine/tune';
import { prepareMatmul } from '../../../src/engine/tune/gemm';
import { callForms, type MatmulJob } from '../../../src/engine/tune/jobs';
import { testRuntime } from '../../helpers/gpu';
import { buildModel } from '../../helpers/model';
import { PRESETS } from '../../../src/engine/model/config';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';

describe('fp32 GEMM jobs in the forms the step runs', () => {
  it('counts each shape\'s writing and accumulating calls from the model\'s linears', () => {
    const opts = defaultTrainOptions('micro');
    const { N, C, F, QC, KVC, L } = resolveTrainingPlan(opts).model.dims;
    const jobs = new Map(trainingTuneJobs(opts).flatMap((j) => (j.family === 'matmul' ? [[j.key, j] as const] : [])));
    const calls = (key: string) => jobs.get(key)?.calls;
    expect(QC).toBe(C); // q's and o's shapes meet; micro's k and v have fewer heads (KVC < C)
    expect(KVC).toBeLessThan(C);
    expect(calls(`${N}x${C}x${C}NT`)).toEqual({ plain: L, accumulate: L }); // q forward writes, o's accumulates onto the residual
    expect(calls(`${N}x${KVC}x${C}NT`)).toEqual({ plain: 2 * L, accumulate: 0 }); // k, v forward
    expect(calls(`${N}x${C}x${C}NN`)).toEqual({ plain: 2 * L, accumulate: 0 }); // q, o dX write
    expect(calls(`${N}x${C}x${KVC}NN`)).toEqual({ plain: 0, accumulate: 2 * L }); // k, v dX add to q's
    expect(calls(`${N}x${F}x${C}NT`)).toEqual({ plain: 2 * L, accumulate: 0 }); // gate, up forward
    expect(calls(`${N}x${C}x${F}NT`)).toEqual({ plain: L, accumulate: 0 }); // down forward: into dq, then added to the residual
    expect(calls(`${N}x${C}x${F}NN`)).toEqual({ plain: 2 * L, accumulate: 0 }); // gate dX writes dh, up dX writes dq (added to dh)
    expect(calls(`${C}x${C}x${N}TN`)).toEqual({ plain: 2 * L, accumulate: 0 }); // q, o dW write
    expect(callForms(jobs.get(`${N}x${C}x${C}NT`)!.calls)).toEqual([false, true]);
    expect(callForms(jobs.get(`${N}x${KVC}x${C}NT`)!.calls)).toEqual([false]);
    expect(callForms(jobs.get(`${N}x${C}x${F}NT`)!.calls)).toEqual([false]);
    expect(callForms(undefined)).toEqual([false]);
  });

  it('the step runs down_proj\'s forward and up\'s dX through dq as the jobs count them (fp32 and AGoQ\'s aliased live copies)', async () => {
    const rt = await testRuntime();
    for (const scheme of [SCHEME_PRESETS.fp32, SCHEME_PRESETS.agoq]) {
      const model = buildModel(rt, PRESETS.micro, 2, 16, { scheme });
      try {
        const fwd = model.forward.map((d) => d.label);
        const bwd = model.backward.map((d) => d.label);
        const L = model.plan.dims.L;
        expect(fwd.filter((l) => /^L\d+\.down_proj\.acc\./.test(l))).toHaveLength(L);
        expect(bwd.filter((l) => /^L\d+\.up\.dx\.acc\./.test(l))).toHaveLength(L);
        expect(fwd.some((l) => /\.o_proj\.acc\./.test(l))).toBe(false); // o_proj accumulates in its GEMM
      } finally {
        model.destroy();
      }
    }
  }, 60_000);

  it('a candidate is checked in each form and timed as the forms in turn, per GEMM', async () => {
    const rt = await testRuntime();
    const job: MatmulJob = { family: 'matmul', key: '48x40x36NN', label: 'forms', shape: { M: 48, N: 40, K: 36 }, workspaceBytes: 0, calls: { plain: 1, accumulate: 2 } };
    const p = prepareMatmul(rt, job, { maxGemmCandidates: 1, gemmInner: 4 });
    try {
      const [c] = p.candidates;
      expect(await c.check()).toBeNull();
      const built = await c.build();
      // 4 GEMMs a pass rounded to whole turns of (write, accumulate, accumulate): 3; each one dispatch.
      expect(built.inner).toBe(3);
      expect(built.dispatches).toHaveLength(3);
      // The writing GEMM, then the accumulating one twice (one pipeline built per form).
      expect(built.dispatches[1]).toBe(built.dispatches[2]);
      expect(built.dispatches[0]).not.toBe(built.dispatches[1]);
      rt.run(built.dispatches);
      await rt.device.queue.onSubmittedWorkDone();
      built.free();
    } finally {
      p.free();
    }
  }, 60_000);
});
