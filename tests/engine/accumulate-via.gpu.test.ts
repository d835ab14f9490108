/**
 * LinearGemms.fp32Accumulate: an accumulating fp32 GEMM run as a writing GEMM into a dead scratch plus
 * C += 1·scratch must give the accumulating GEMM's bits (the model's down_proj and up.dx take it), for
 * the NT forward and NN dX forms, vec4 and scalar adds.
 */
import { describe, expect, it } from 'vitest';
import { axpy } from '../../src/engine/kernels/elementwise/elementwise';
import { matmul } from '../../src/engine/kernels/matmul/matmul';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

describe('accumulating through a scratch', () => {
  for (const [M, N, K, transB] of [[96, 64, 160, true], [70, 33, 48, false], [128, 96, 256, false]] as const) {
    it(`C + A·op(B) bit for bit: ${M}x${N}x${K}${transB ? ' NT' : ' NN'}`, async () => {
      const rt = await testRuntime();
      const rng = new Rng(M + N + K);
      const a = up(rt, rng.normalArray(M * K));
      const b = up(rt, rng.normalArray(K * N));
      const c0 = rng.normalArray(M * N);
      const direct = up(rt, c0);
      const via = up(rt, c0);
      const scratch = up(rt, new Float32Array(M * N + 64).fill(7)); // larger than C, stale contents
      const n = M * N;
      rt.run([
        matmul(rt, { label: 'acc', a, b, c: direct, M, N, K, transB, accumulate: true }),
        matmul(rt, { label: 'via', a, b, c: { buffer: scratch, offset: 0, size: n * 4 }, M, N, K, transB }),
        axpy(rt, { label: 'via.acc', x: { buffer: scratch, offset: 0, size: n * 4 }, out: via, alpha: 1, n }),
      ]);
      const x = await rt.readF32(direct, 0, n);
      const y = await rt.readF32(via, 0, n);
      expect(new Uint32Array(y.buffer, y.byteOffset, n)).toEqual(new Uint32Array(x.buffer, x.byteOffset, n));
      expect(x.some((v, i) => v !== c0[i])).toBe(true);
    });
  }
});
