import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { grid2d, nextPow2, rowWorkgroupSize, sameBinding } from '../../src/engine/kernels/launch';

const fakeRt = { device: { limits: { maxComputeWorkgroupsPerDimension: 65535 } } } as unknown as Runtime;

describe('launch helpers', () => {
  it('grid2d covers every workgroup with x within the device limit', () => {
    expect(grid2d(fakeRt, 0)).toEqual([0, 1]);
    expect(grid2d(fakeRt, 1)).toEqual([1, 1]);
    expect(grid2d(fakeRt, 65535)).toEqual([65535, 1]);
    expect(grid2d(fakeRt, 65536)).toEqual([65535, 2]);
    for (const g of [70000, 1 << 20, 123457 * 3]) {
      const [x, y] = grid2d(fakeRt, g);
      expect(x).toBeLessThanOrEqual(65535);
      expect(x * y).toBeGreaterThanOrEqual(g);
      expect(x * (y - 1)).toBeLessThan(g);
    }
    expect(() => grid2d(fakeRt, 65535 * 65536)).toThrow();
  });

  it('row workgroup sizes are powers of two in [32, 256]', () => {
    expect(nextPow2(1)).toBe(1);
    expect(nextPow2(65)).toBe(128);
    expect([1, 7, 33, 65, 384, 4096].map((c) => rowWorkgroupSize(c))).toEqual([32, 32, 64, 128, 256, 256]);
  });

  it('sameBinding compares buffer, offset and size', () => {
    const a = { mapAsync: () => 0 } as unknown as GPUBuffer;
    const b = { mapAsync: () => 0 } as unknown as GPUBuffer;
    expect(sameBinding(a, a)).toBe(true);
    expect(sameBinding(a, { buffer: a })).toBe(true);
    expect(sameBinding(a, { buffer: a, offset: 256 })).toBe(false);
    expect(sameBinding(a, b)).toBe(false);
  });
});
