import { describe, expect, it } from 'vitest';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { planMemory, resolveBudgetOptions } from '../../src/engine/train/trainer';

const withBudget = (budget: number) => parseScheme({
  name: 'budget',
  layer: { saved: { attn_qkv: { format: 'fp32' }, attn_out: { format: 'fp32' } } },
  budget_bytes: budget,
});

describe('AGoQ memory budget → per-layer bits', () => {
  const fp32 = planMemory(defaultTrainOptions('small')).total;
  it('fits the budget with the real plan, and a larger budget never uses fewer bits', () => {
    let prevBits = -1;
    for (const frac of [0.5, 0.6, 0.7, 0.85, 1.0]) {
      const opts = defaultTrainOptions('small', { scheme: withBudget(Math.floor(fp32 * frac)) });
      const { opts: resolved, choice } = resolveBudgetOptions(opts);
      expect(choice).not.toBeNull();
      expect(planMemory(resolved).total).toBeLessThanOrEqual(Math.floor(fp32 * frac));
      expect(choice!.planned).toEqual(planMemory(resolved));
      const bits = Object.values(choice!.bits).flatMap((k) => Object.values(k)).reduce((s, b) => s + (b as number), 0);
      expect(bits).toBeGreaterThanOrEqual(prevBits);
      prevBits = bits;
      // Attention stays full precision.
      for (const k of Object.values(choice!.bits)) {
        expect(k.attn_qkv).toBe(32);
        expect(k.attn_out).toBe(32);
      }
    }
  });
  it('explains an infeasible budget', () => {
    expect(() => resolveBudgetOptions(defaultTrainOptions('small', { scheme: withBudget(10_000_000) }))).toThrow(/infeasible.*at least/s);
  });
});
