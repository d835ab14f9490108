// The f16 tensor-core layouts as tuning choices (tune/f16-gemm.ts): an f16 run's jobs (shape and form
// per GEMM the scheme runs in f16), picks named by layout label (parsed back, stale names refused),
// and their cache entries under their own family and code hash.
import { describe, expect, it } from 'vitest';
import { F16_TC_LAYOUTS, f16TcPick, f16TcSpecOfPick, type F16TcSpec, FORM_TRANS, GEMM_FORMS } from '../../../src/engine/kernels/matmul-f16/plan';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { resolveTrainingPlan } from '../../../src/engine/plan/train-plan';
import { codeHash, TuneCache, trainingTuneJobs } from '../../../src/engine/tune';
import { tunedPicks } from '../../../src/engine/tune/store';

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const entry = (picks: string[]) => ({ picks, ms: 0.5, candidates: 3, at: '2026-12-06T10:00:00.000Z' });

describe('f16 tensor-core layouts as tuning choices', () => {
  it('an f16 run has a job per f16 GEMM shape and form (forward NT, dX NN, dW TN); an fp32 run none', () => {
    const jobs = trainingTuneJobs({ ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 });
    const f16 = jobs.filter((j) => j.family === 'f16gemm');
    const keys = f16.map((j) => j.key);
    expect(keys).toContain('128x32x32NT'); // q forward: 128 tokens, X·Wᵀ
    expect(keys).toContain('128x32x32NN'); // q dX
    expect(keys).toContain('32x32x128TN'); // q dW
    expect(keys).toContain('128x64x32NT'); // gate forward
    expect(new Set(keys).size).toBe(keys.length);
    for (const j of f16) if (j.family === 'f16gemm') expect(j.key.endsWith(j.form)).toBe(true);
    expect(trainingTuneJobs(defaultTrainOptions('micro')).some((j) => j.family === 'f16gemm')).toBe(false);
  });

  it("a dW job carries the split-K workspace the step gives its GEMM (the dead backward scratch); forward and dX none", () => {
    const opts = { ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 };
    const plan = resolveTrainingPlan(opts).model;
    const bytes = (key: string) => plan.buffers.find((b) => b.key === key)!.bytes;
    const jobs = new Map(trainingTuneJobs(opts).flatMap((j) => (j.family === 'f16gemm' ? [[j.key, j] as const] : [])));
    expect(jobs.get('32x32x128TN')?.workspaceBytes).toBe(bytes('dF1')); // q/k/v/o dW split into dF1
    expect(jobs.get('64x32x128TN')?.workspaceBytes).toBe(bytes('dq')); // gate/up dW into dq
    expect(bytes('dq')).toBeGreaterThan(0);
    for (const j of jobs.values()) if (j.form !== 'TN') expect(j.workspaceBytes).toBe(0);
    // And the step's writing and accumulating calls of each shape (timed in both forms, as fp32's: tune/gemm-forms).
    const L = plan.dims.L;
    expect(jobs.get('128x32x32NT')?.calls).toEqual({ plain: L, accumulate: L }); // q forward writes, o forward accumulates
    expect(jobs.get('128x32x64NT')?.calls).toEqual({ plain: 0, accumulate: L }); // down forward onto the residual
    expect(jobs.get('128x32x64NN')?.calls).toEqual({ plain: L, accumulate: L }); // gate dX writes, up dX accumulates
    expect(jobs.get('64x32x128TN')?.calls).toEqual({ plain: 2 * L, accumulate: 0 }); // gate, up dW
  });

  it('a pick names a layout: every layout, form and configuration parses back to its spec; other names do not', () => {
    const names = new Set<string>();
    for (const l of F16_TC_LAYOUTS) {
      for (const form of GEMM_FORMS) {
        for (const cfg of [{ M: 16, N: 16, K: 16 }, { M: 16, N: 8, K: 16 }]) {
          const s: F16TcSpec = { cfg, ...FORM_TRANS[form], sgSize: 32, ...l };
          const pick = f16TcPick(s);
          expect(pick).toMatch(/^[A-Za-z0-9_/.]{1,64}$/); // the tuning cache's spelling of a pick
          expect(f16TcSpecOfPick(pick, 32)).toEqual(s);
          names.add(pick);
        }
      }
    }
    expect(names.size).toBe(F16_TC_LAYOUTS.length * 3 * 2);
    expect(f16TcPick({ cfg: { M: 16, N: 16, K: 16 }, ...FORM_TRANS.NT, sgSize: 32, ...F16_TC_LAYOUTS[0], stages: 2, loop: 'streamB', copy: 8, swizzle: 8 }))
      .toBe('NT.16x16x16.4x4.2x2.bk32.p8.d.s2.sb.c8.z8');
    expect(f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk24.p8.d', 32)).toBeNull(); // BK not a multiple of the tile's K
    expect(f16TcSpecOfPick('NT.16x16x16.4x4.2x2.bk32.p8.d.s3', 32)).toBeNull(); // a name of another build
    expect(f16TcSpecOfPick('TT.16x16x16.4x4.2x2.bk32.p8.d', 32)).toBeNull();
    expect(f16TcSpecOfPick('128x128k8_8x16', 32)).toBeNull(); // an fp32 GEMM choice
  });

  it('the cache keeps f16 picks under their own family and code hash, drops names this build cannot run, applies the rest', () => {
    const label = f16TcPick({ cfg: { M: 16, N: 16, K: 16 }, ...FORM_TRANS.NT, sgSize: 32, ...F16_TC_LAYOUTS[F16_TC_LAYOUTS.length - 1] });
    const c = new TuneCache();
    c.put(H100, 'f16gemm', '8192x768x768NT', entry([label]));
    c.put(H100, 'f16gemm', '768x768x8192TN', entry(['TN.16x16x16.4x4.2x2.bk32.p8.d.s4']));
    c.put(H100, 'matmul', '8192x768x768NT', entry(['128x128k8_8x16']));
    const back = TuneCache.parse(c.serialize());
    expect(back.get(H100, 'f16gemm', '8192x768x768NT')?.picks).toEqual([label]);
    expect(JSON.parse(c.serialize()).adapters[0].families.f16gemm.codeHash).toBe(codeHash('f16gemm'));
    expect(codeHash('f16gemm')).not.toBe(codeHash('matmul'));
    const device = {};
    back.applyTo(device, H100);
    expect(tunedPicks(device, 'f16gemm', '8192x768x768NT')).toEqual([label]);
    expect(tunedPicks(device, 'f16gemm', '768x768x8192TN')).toBeUndefined();
    expect(() => TuneCache.parse(JSON.stringify({ ...JSON.parse(c.serialize()), adapters: [{ ...JSON.parse(c.serialize()).adapters[0], families: { f16gemm: { codeHash: codeHash('f16gemm'), entries: { 'fwd/D64': entry([label]) } } } }] }))).toThrow(/not a f16gemm choice key/);
  });
});
