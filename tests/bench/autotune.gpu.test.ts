// The autotuner (bench/autotune.ts) on SwiftShader: its timings are meaningless here, but the
// pick it caches, the table it exports and loads, and the calls that then use the pick are not.
import { describe, expect, it } from 'vitest';
import { autotuneMatmul } from '../../bench/autotune';
import { buildMatmul } from '../../src/engine/kernels/matmul/matmul';
import { chooseMatmulVariant, loadTunedTable, tunedTable, tunedVariant } from '../../src/engine/kernels/matmul/choice';
import type { MatmulShape } from '../../src/engine/kernels/matmul/plan';
import { testRuntime } from '../helpers/gpu';

const SMALL = '32x32k16_4x4';

describe('autotuneMatmul', () => {
  const shape: MatmulShape = { M: 37, N: 44, K: 52, transB: true };

  it('autotuneMatmul times each candidate, caches the fastest, and matmul() then uses it', async () => {
    const rt = await testRuntime();
    const candidates = [SMALL, '64x64k16_4x4'];
    const [res] = await autotuneMatmul(rt, [shape], { variants: candidates, warmup: 1, reps: 2, inner: 2 });
    expect(candidates).toContain(res.variant);
    expect(Object.keys(res.timesMs).sort()).toEqual([...candidates].sort());
    for (const t of Object.values(res.timesMs)) expect(t).toBeGreaterThan(0);
    expect(res.timesMs[res.variant]).toBe(Math.min(...Object.values(res.timesMs)));
    expect(tunedVariant(rt, shape)).toBe(res.variant);
    expect(tunedTable(rt)).toMatchObject({ '37x44x52NT': res.variant });
    loadTunedTable(rt, { '1x2x3NN': SMALL, '1x2x4NN': 'no-such-variant' });
    expect(tunedVariant(rt, { M: 1, N: 2, K: 3 })).toBe(SMALL);
    expect(tunedVariant(rt, { M: 1, N: 2, K: 4 })).toBeUndefined();
    const other = { ...shape, transB: false };
    expect(tunedVariant(rt, other)).toBeUndefined();
    const buf = rt.createBuffer('workspace', 'x', 4 * 52 * 44);
    const tuned = buildMatmul(rt, { label: 'tuned', ...shape, a: buf, b: buf, c: buf });
    expect(tuned.variant).toBe(res.variant);
    const untuned = buildMatmul(rt, { label: 'untuned', ...other, a: buf, b: buf, c: buf });
    expect(untuned.variant).toBe(chooseMatmulVariant(other, rt.device.limits));
    [buf, ...tuned.uniforms, ...untuned.uniforms].forEach((x) => rt.mem.free(x));
  });
});
