import { describe, expect, it } from 'vitest';
import { globalNormPartialsBytes, SUMSQ_MAX_PARTIALS, sumSquaresPartialCount } from '../../src/engine/kernels/reduce/reduce';
import { globalNormRef, sumSquaresRef } from '../../src/engine/kernels/reduce/reduce.ref';

describe('reduce helpers', () => {
  it('partial counts grow with n up to the cap and never hit zero', () => {
    expect(sumSquaresPartialCount(0)).toBe(1);
    expect(sumSquaresPartialCount(1)).toBe(1);
    expect(sumSquaresPartialCount(256)).toBe(1);
    expect(sumSquaresPartialCount(257)).toBe(2);
    expect(sumSquaresPartialCount(1e9)).toBe(SUMSQ_MAX_PARTIALS);
    expect(globalNormPartialsBytes([1, 257, 1e9])).toBe(4 * (1 + 2 + SUMSQ_MAX_PARTIALS));
  });

  it('reference norm is the L2 norm over all arrays', () => {
    expect(sumSquaresRef([3, 4])).toBe(25);
    expect(globalNormRef([3], [4], [])).toBe(5);
  });
});
