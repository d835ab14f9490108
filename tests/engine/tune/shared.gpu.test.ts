// A group member's shared pick on SwiftShader (engine/tune/shared.ts applySharedPicks): checked on the
// device against the float64 reference as the tuner checks a candidate, then applied; the GEMM built
// next runs it and the run's status names the member ("tuned (shared by peer …)").
import { describe, expect, it } from 'vitest';
import { buildMatmul } from '../../../src/engine/kernels/matmul/matmul';
import { adapterKeyOf, applySharedPicks, madeChoices, resetChoices, TuneCache, tuningStatus } from '../../../src/engine/tune';
import { MATMUL_VARIANTS } from '../../../src/engine/kernels/matmul/variants';
import { matmulCandidateProblem, matmulCandidates } from '../../../src/engine/tune/gemm';
import type { MatmulJob } from '../../../src/engine/tune/jobs';
import { attentionTestRuntime } from '../../helpers/gpu';

const job: MatmulJob = { family: 'matmul', key: '29x36x44NN', label: 'a small GEMM', shape: { M: 29, N: 36, K: 44 }, workspaceBytes: 0 };

describe('applySharedPicks', () => {
  it("checks a member's pick on the device, applies it, and the run says whose it was", async () => {
    const rt = await attentionTestRuntime();
    const adapter = adapterKeyOf(rt.gpu.adapterInfo);
    // Not the heuristic's first choice, so the GEMM below can only run it because it was applied.
    const heuristic = matmulCandidates(rt, job).candidates[0];
    const pick = MATMUL_VARIANTS.map((v) => v.name).find((n) => n !== heuristic && matmulCandidateProblem(rt.device.limits, job.shape, n, 0) === null)!;
    expect(pick).toBeDefined();
    const cache = new TuneCache();
    cache.putShared(adapter, 'matmul', job.key, { picks: [pick], ms: 0.1, candidates: 0, at: '2026-12-06T00:00:00.000Z', sharedBy: 'peer-x' });
    const out = await applySharedPicks(rt, cache, [job]);
    expect(out).toEqual({ applied: [{ key: job.key, from: 'peer-x' }], failed: [] });
    resetChoices(rt.device);
    const buf = rt.createBuffer('workspace', 'x', 4 * 44 * 36);
    const built = buildMatmul(rt, { label: 'shared', ...job.shape, a: buf, b: buf, c: buf });
    expect(built.variant).toBe(pick);
    expect(madeChoices(rt.device)).toEqual([{ family: 'matmul', key: job.key, source: 'tuned', sharedBy: 'peer-x' }]);
    expect(tuningStatus(madeChoices(rt.device)).label).toBe('tuned (shared by peer peer-x)');
    [buf, ...built.uniforms].forEach((x) => rt.mem.free(x));
  }, 120_000);
});
