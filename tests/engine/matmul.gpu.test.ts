import { describe, expect, it } from 'vitest';
import { buildMatmul, MATMUL_VARIANTS, availableVariants } from '../../src/engine/kernels/matmul';
import { matmulRef } from '../../src/engine/kernels/matmul.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { expectClose } from '../helpers/compare';

describe('smoke', () => {
  it('runs', async () => {
    const rt = await testRuntime();
    console.log(rt.device.limits.maxComputeWorkgroupStorageSize, availableVariants(rt.device.limits).map(v=>v.name), rt.gpu.features);
    const rng = new Rng(1);
    const [M, N, K] = [65, 63, 129];
    for (const v of availableVariants(rt.device.limits)) {
      for (const tA of [false, true]) for (const tB of [false, true]) {
        const a = rng.uniformArray(M * K), b = rng.uniformArray(K * N), c0 = rng.uniformArray(M * N);
        const A = rt.upload('workspace', 'a', a), B = rt.upload('workspace', 'b', b), C = rt.upload('workspace', 'c', c0);
        const t0 = performance.now();
        const built = buildMatmul(rt, { label: 'mm', a: A, b: B, c: C, M, N, K, transA: tA, transB: tB, accumulate: true, alpha: 0.5, variant: v.name });
        rt.run([built.dispatch]);
        const r = await rt.readF32(C, 0, M * N);
        console.log(v.name, tA, tB, (performance.now() - t0).toFixed(0), 'ms');
        expectClose(r, matmulRef(a, b, M, N, K, { transA: tA, transB: tB, alpha: 0.5, c0 }), { atol: 1e-4, rtol: 1e-4, label: `${v.name} ${tA} ${tB}` });
      }
    }
  });
});
