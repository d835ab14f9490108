import { describe, expect, it } from 'vitest';
import { benchQuantize } from '../../src/lab/quant';
import { testRuntime } from '../helpers/gpu';

describe('benchQuantize', () => {
  it('reports a positive finite throughput', async () => {
    const gbps = await benchQuantize(await testRuntime(), 1 << 14, { reps: 2 });
    expect(gbps).toBeGreaterThan(0);
    expect(Number.isFinite(gbps)).toBe(true);
  });
});
