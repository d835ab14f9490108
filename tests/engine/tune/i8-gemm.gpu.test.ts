// The tuner's INT8 tensor-core jobs on the test device: they are the step's qgemmI8 calls (shape, writing or
// accumulating, the dW's workspace), recorded as the model builds them; SwiftShader has no subgroup matrices,
// so each job says it is skipped and why, times nothing and records nothing.
import { describe, expect, it, vi } from 'vitest';
import { PRESETS } from '../../../src/engine/model/config';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { parseScheme } from '../../../src/engine/scheme/scheme';
import { planTuneJobs, trainingTuneJobs } from '../../../src/engine/tune';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { expectSkippedTune } from '../../helpers/tune';
import { testRuntime } from '../../helpers/gpu';
import { buildModel } from '../../helpers/model';
import type { Runtime } from '../../../src/engine/gpu/runtime';

/** Every qgemmI8 / qgemmI8Steps call the model makes: a spy around the real kernels (they still build and run). */
const calls: { M: number; N: number; K: number; accumulate: boolean; workspace: boolean }[] = [];
vi.mock('../../../src/engine/kernels/qgemm/qgemm', async (load) => {
  const real = await load<typeof import('../../../src/engine/kernels/qgemm/qgemm')>();
  type A = Parameters<typeof real.qgemmI8Steps>[1];
  const note = (a: A) => calls.push({ M: a.M, N: a.N, K: a.K, accumulate: !!a.accumulate, workspace: a.workspace !== undefined });
  return {
    ...real,
    qgemmI8: (rt: Parameters<typeof real.qgemmI8>[0], a: A) => (note(a), real.qgemmI8(rt, a)),
    qgemmI8Steps: (rt: Parameters<typeof real.qgemmI8Steps>[0], a: A) => (note(a), real.qgemmI8Steps(rt, a)),
  };
});

/** Every transposed quantizer the model builds: x [R, CN] per G rows or per column ('all'), and its rounding. */
const quants: { key: string; rounding: string }[] = [];
vi.mock('../../../src/engine/kernels/qgemm/block', async (load) => {
  const real = await load<typeof import('../../../src/engine/kernels/qgemm/block')>();
  return {
    ...real,
    quantizeColumnsI8: (rt: Runtime, a: Parameters<typeof real.quantizeColumnsI8>[1]) => {
      quants.push({ key: real.i8QuantKey(a.R, a.CN, 'all'), rounding: a.rounding ?? 'nearest' });
      return real.quantizeColumnsI8(rt, a);
    },
    quantizeTransposedI8: (rt: Runtime, a: Parameters<typeof real.quantizeTransposedI8>[1]) => {
      quants.push({ key: real.i8QuantKey(a.R, a.CN, a.G), rounding: a.rounding ?? 'nearest' });
      return real.quantizeTransposedI8(rt, a);
    },
  };
});

const rt = await testRuntime();

describe('INT8 tensor-core layouts in the tuner', () => {
  it('the jobs are the qgemmI8 calls the step makes: each shape\'s writing and accumulating calls, a workspace where the dW has one', async () => {
    calls.length = 0;
    const model = buildModel(rt, PRESETS.micro, 4, 32, { scheme: SCHEME_PRESETS['int8-attn'] });
    try {
      const jobs = planTuneJobs(model.plan).filter((j) => j.family === 'i8tc');
      const seen = new Map<string, { plain: number; accumulate: number; workspace: boolean }>();
      for (const c of calls) {
        const k = `${c.M}x${c.N}x${c.K}`;
        const s = seen.get(k) ?? { plain: 0, accumulate: 0, workspace: false };
        s[c.accumulate ? 'accumulate' : 'plain']++;
        s.workspace ||= c.workspace;
        seen.set(k, s);
      }
      expect(calls.length).toBeGreaterThan(0);
      expect(new Set(jobs.map((j) => j.key))).toEqual(new Set(seen.keys()));
      for (const j of jobs) {
        if (j.family !== 'i8tc') continue;
        const s = seen.get(j.key)!;
        expect({ key: j.key, ...j.calls }).toEqual({ key: j.key, plain: s.plain, accumulate: s.accumulate });
        expect({ key: j.key, workspace: j.workspaceBytes > 0 }).toEqual({ key: j.key, workspace: s.workspace });
      }
    } finally {
      model.destroy();
    }
  }, 60_000);

  it('the quantizer jobs are the transposed quantizers the step builds, in their rounding (per-GEMM weights, stochastic dY, blocked dW)', async () => {
    const scheme = parseScheme({
      name: 'int8-blockdw-sr', weight_codes: 'per-gemm',
      layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 32, grad_rounding: 'stochastic' } },
    });
    for (const s of [SCHEME_PRESETS['int8-attn'], scheme]) {
      quants.length = 0;
      const model = buildModel(rt, PRESETS.micro, 4, 32, { scheme: s });
      try {
        const jobs = planTuneJobs(model.plan).flatMap((j) => (j.family === 'i8quant' ? [j] : []));
        const seen = new Map<string, string>();
        for (const q of quants) if (seen.get(q.key) !== 'stochastic') seen.set(q.key, q.rounding);
        expect(quants.length).toBeGreaterThan(0);
        expect(new Map(jobs.map((j) => [j.key, j.rounding]))).toEqual(seen);
      } finally {
        model.destroy();
      }
    }
  }, 90_000);

  it.skipIf(rt.gpu.features.subgroupMatrix)('without INT8 subgroup matrices each job is skipped with the reason, nothing timed or cached', async () => {
    const jobs = trainingTuneJobs({ ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS['int8-attn'] }).filter((j) => j.family === 'i8tc').slice(0, 3);
    expect(jobs.length).toBe(3);
    await expectSkippedTune(rt, jobs, 'i8tc', 'INT8 tensor-core layouts', /^skipped: this device has no INT8 subgroup matrices/);
  });
});
