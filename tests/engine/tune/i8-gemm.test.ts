// The INT8 tensor-core layouts as tuning choices (tune/i8-gemm.ts): an INT8 run's jobs (one per qgemmI8
// shape the step runs, with its writing and accumulating calls and the dW's split-K workspace), picks
// named by configuration and layout (parsed back, stale or hostile names refused), their cache entries
// under their own family and code hash, and a device without INT8 subgroup matrices skipping them.
import { describe, expect, it } from 'vitest';
import { i8TcPick, i8TcPickParse, i8TcSpecOfPick } from '../../../src/engine/kernels/qgemm/tc';
import { I8_TC_LAYOUTS } from '../../../src/engine/kernels/qgemm/tc-tables';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { resolveTrainingPlan } from '../../../src/engine/plan/train-plan';
import { codeHash, TuneCache, trainingTuneJobs } from '../../../src/engine/tune';
import type { I8GemmJob } from '../../../src/engine/tune/jobs';
import { tunedPicks } from '../../../src/engine/tune/store';

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const entry = (picks: string[]) => ({ picks, ms: 0.05, candidates: 9, at: '2026-12-08T01:00:00.000Z' });
const i8Jobs = (scheme: keyof typeof SCHEME_PRESETS) => {
  const opts = { ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS[scheme] };
  return { plan: resolveTrainingPlan(opts).model, jobs: new Map(trainingTuneJobs(opts).flatMap((j) => (j.family === 'i8tc' ? [[j.key, j as I8GemmJob] as const] : []))) };
};

describe('INT8 tensor-core layouts as tuning choices', () => {
  it('an INT8 run has a job per qgemmI8 shape: forward, dX (gate and up as one over 2F), dW over all tokens with its workspace', () => {
    const { plan, jobs } = i8Jobs('int8-attn');
    const { N, C, F, KVC, L } = plan.dims;
    const bytes = (key: string) => plan.buffers.find((b) => b.key === key)!.bytes;
    expect(plan.gateUpDx.every(Boolean)).toBe(true);
    const calls = (key: string) => jobs.get(key)?.calls;
    expect(calls(`${N}x${C}x${C}`)).toEqual({ plain: 3 * L, accumulate: L }); // q forward and q, o dX write; o forward onto the residual
    expect(calls(`${N}x${KVC}x${C}`)).toEqual({ plain: 2 * L, accumulate: 0 }); // k, v forward
    expect(calls(`${N}x${C}x${KVC}`)).toEqual({ plain: 0, accumulate: 2 * L }); // k, v dX add to q's
    expect(calls(`${N}x${F}x${C}`)).toEqual({ plain: 3 * L, accumulate: 0 }); // gate, up forward; down dX
    expect(calls(`${N}x${C}x${F}`)).toEqual({ plain: 0, accumulate: L }); // down forward onto the residual
    expect(calls(`${N}x${C}x${2 * F}`)).toEqual({ plain: L, accumulate: 0 }); // gate and up dX in one GEMM
    expect(jobs.get(`${C}x${C}x${N}`)?.workspaceBytes).toBe(bytes('dF1')); // q, o dW split into dF1
    expect(jobs.get(`${F}x${C}x${N}`)?.workspaceBytes).toBe(bytes('dq')); // gate, up dW into dq
    expect(jobs.get(`${C}x${F}x${N}`)?.calls).toEqual({ plain: L, accumulate: 0 }); // down dW
    for (const j of jobs.values()) if (j.shape.K !== N) expect(j.workspaceBytes).toBe(0);
    expect(jobs.get(`${N}x${C}x${F}`)?.label).toBe(`int8 ${N}x${C}x${F}: down forward`);
    // No INT8 GEMM, no job: fp32, f16; a blocked dW runs the dot4 blocked kernel, not qgemmI8.
    expect(i8Jobs('fp32').jobs.size).toBe(0);
    expect(i8Jobs('f16').jobs.size).toBe(0);
    const blocked = i8Jobs('int8-blockdw');
    for (const dw of [`${C}x${C}x${N}`, `${F}x${C}x${N}`, `${C}x${F}x${N}`]) expect(blocked.jobs.has(dw)).toBe(false);
    expect(blocked.jobs.size).toBeGreaterThan(0);
  });

  it('an INT8 run has a quantizer job per transposed quantizer shape: Xᵀ and dYᵀ per column (or per block), Wᵀ only where weights are quantized per GEMM', () => {
    const opts = { ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS['int8-attn'] };
    const plan = resolveTrainingPlan(opts).model;
    const { N, C, F, KVC } = plan.dims;
    const quant = new Map(trainingTuneJobs(opts).flatMap((j) => (j.family === 'i8quant' ? [[j.key, j] as const] : [])));
    expect(plan.wcodes).toBeTruthy(); // int8-attn makes the weights' codes once per step: no Wᵀ quantizer per GEMM
    // Xᵀ of h1 (q, shared by k and v), o, h2 (gate, shared by up), act (down); dYᵀ of q, k/v, o, gate/up, down.
    expect(new Set(quant.keys())).toEqual(new Set([`${N}x${C}/all`, `${N}x${F}/all`, `${N}x${KVC}/all`]));
    expect(quant.get(`${N}x${C}/all`)?.label).toMatch(/^int8 quantizer \d+x\d+ per column: q dW Xᵀ, q dW dYᵀ, o dW Xᵀ, o dW dYᵀ, gate dW Xᵀ, down dW dYᵀ$/);
    for (const j of quant.values()) expect(j.rounding).toBe('nearest');
    // Weights quantized per GEMM: Wᵀ per input channel, [out, in] (gate and up's as one, [2F, C]).
    const perGemm = { ...opts, scheme: { ...opts.scheme, weight_codes: 'per-gemm' as const } };
    const keys = new Set(trainingTuneJobs(perGemm).flatMap((j) => (j.family === 'i8quant' ? [j.key] : [])));
    for (const k of [`${C}x${C}/all`, `${KVC}x${C}/all`, `${C}x${F}/all`, `${2 * F}x${C}/all`]) expect(keys.has(k)).toBe(true);
    expect(keys.has(`${F}x${C}/all`)).toBe(false); // gate's and up's dX run as one GEMM
    // Blocked dW: quantizeTransposedI8 in blocks of dw_block rows.
    const blocked = trainingTuneJobs({ ...opts, scheme: SCHEME_PRESETS['int8-blockdw'] }).flatMap((j) => (j.family === 'i8quant' ? [j.key] : []));
    expect(blocked).toContain(`${N}x${C}/32`);
    expect(blocked.some((k) => k.endsWith('/all') && k.startsWith(`${N}x`))).toBe(false);
  });

  it('a pick names a configuration, a layout and whether it splits K: each parses back; other names do not', () => {
    const names = new Set<string>();
    for (const layout of I8_TC_LAYOUTS) {
      for (const cfg of [{ M: 16, N: 16, K: 32 }, { M: 16, N: 8, K: 32 }]) {
        for (const split of [false, true]) {
          const pick = i8TcPick({ cfg: { componentType: 'i8', resultComponentType: 'i32', ...cfg }, ...layout }, split);
          expect(pick).toMatch(/^[A-Za-z0-9_/.]{1,64}$/); // the tuning cache's spelling of a pick
          const parts = i8TcPickParse(pick);
          expect(parts).toEqual({ cfg, layout, split });
          expect(i8TcSpecOfPick({ syntax: 'bool', unitDiv: 4, sgSize: 32 }, parts!)).toMatchObject({ syntax: 'bool', unitDiv: 4, sgSize: 32, ...layout });
          names.add(pick);
        }
      }
    }
    expect(names.size).toBe(I8_TC_LAYOUTS.length * 2 * 2);
    expect(i8TcPick({ cfg: { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 }, ...I8_TC_LAYOUTS[4] }, true)).toBe('i8.16x16x32.t2x4.sg2x2.bk64.p16.e2.split');
    for (const bad of ['i8.16x16x32.t2x4.sg2x2.bk64.p16.e1', 'i8.16x16x32.t0x4.sg2x2.bk64.p16', 'i8.16x16x32.t2x4.sg2x2.bk64.p16.split.split',
      'NT.16x16x16.4x4.2x2.bk32.p8.d', '128x128k8_8x16', 'i8.16x16x32.t2x4.sg2x2.bk64.p16 ']) expect(i8TcPickParse(bad)).toBeNull();
  });

  it('the cache keeps INT8 picks under their own family and code hash, drops names this build cannot run, applies the rest', () => {
    const pick = i8TcPick({ cfg: { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 }, ...I8_TC_LAYOUTS[7] }, false);
    const c = new TuneCache();
    c.put(H100, 'i8tc', '8192x768x768', entry([pick]));
    c.put(H100, 'i8tc', '768x768x8192', entry(['i8.16x16x32.t9x9.sg2x2.bk64']));
    const back = TuneCache.parse(c.serialize());
    expect(back.get(H100, 'i8tc', '8192x768x768')?.picks).toEqual([pick]);
    expect(JSON.parse(c.serialize()).adapters[0].families.i8tc.codeHash).toBe(codeHash('i8tc'));
    expect(new Set([codeHash('i8tc'), codeHash('matmul'), codeHash('f16gemm')]).size).toBe(3);
    const device = {};
    back.applyTo(device, H100);
    expect(tunedPicks(device, 'i8tc', '8192x768x768')).toEqual([pick]);
    expect(tunedPicks(device, 'i8tc', '768x768x8192')).toBeUndefined();
    // A key that is not an M×N×K shape is refused as a whole file (hostile input).
    const data = JSON.parse(c.serialize());
    data.adapters[0].families.i8tc.entries['8192x768x768NT'] = entry([pick]);
    expect(() => TuneCache.parse(data)).toThrow(/i8tc choice key/);
    // The quantizers' forms: a TQ_VARIANTS name per x [R, CN] and block.
    const q = new TuneCache();
    q.put(H100, 'i8quant', '8192x768/all', entry(['staged4']));
    q.put(H100, 'i8quant', '8192x768/32', entry(['constructor']));
    const qb = TuneCache.parse(q.serialize());
    const d2 = {};
    qb.applyTo(d2, H100);
    expect(tunedPicks(d2, 'i8quant', '8192x768/all')).toEqual(['staged4']);
    expect(tunedPicks(d2, 'i8quant', '8192x768/32')).toBeUndefined();
    const bad = JSON.parse(q.serialize());
    bad.adapters[0].families.i8quant.entries['8192x768/al'] = entry(['regs']);
    expect(() => TuneCache.parse(bad)).toThrow(/i8quant choice key/);
  });
});
