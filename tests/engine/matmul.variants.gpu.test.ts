/**
 * Every GEMM variant that fits this device, through its dynamic pipeline (one compile per variant:
 * SwiftShader takes seconds each): more than one tile each way, every tile edge partial, K not a
 * multiple of BK, all transposes, accumulate on and off. The access width (vec4/scalar) is variant-
 * independent code covered in matmul.gpu.test.ts.
 */
import { describe, it } from 'vitest';
import { availableVariants, getVariant } from '../../src/engine/kernels/matmul/variants';
import { testRuntime } from '../helpers/gpu';
import { checkMatmuls, type MatmulCase, TRANS } from './matmul.cases';

describe('every variant that fits this device', async () => {
  const rt = await testRuntime();
  it.each(availableVariants(rt.device.limits).map((v) => v.name))('%s', async (name) => {
    const v = getVariant(name);
    const cases: MatmulCase[] = [];
    for (const [transA, transB] of TRANS) {
      // Odd sizes keep every operand on the scalar path (one pipeline).
      cases.push({ M: v.BM + 3, N: v.BN + 5, K: 2 * v.BK + 7, transA, transB, accumulate: transB, alpha: 0.5 });
      cases.push({ M: 2 * v.BM - 1, N: v.BN - 3, K: v.BK - 1, transA, transB, accumulate: !transB });
      cases.push({ M: 1, N: 1, K: 1, transA, transB });
    }
    await checkMatmuls(rt, cases.map((c) => ({ ...c, variant: name, specialize: false })));
  });
});
