import { describe, expect, it } from 'vitest';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { planMemory, resolveTrainingPlan } from '../../src/engine/plan/train-plan';

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
      const { opts: resolved, budget: choice } = resolveTrainingPlan(opts);
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
  it('with an INT8 forward, stores the 8-bit GEMM inputs per row (one set of codes for storage and GEMM)', () => {
    const scheme = parseScheme({ ...withBudget(Math.floor(fp32 * 0.7)), name: 'budget-int8', layer: { saved: { attn_qkv: { format: 'fp32' }, attn_out: { format: 'fp32' } }, compute: { forward: 'int8' } } });
    const { opts: resolved, budget: choice } = resolveTrainingPlan(defaultTrainOptions('small', { scheme }));
    expect(planMemory(resolved).total).toBeLessThanOrEqual(Math.floor(fp32 * 0.7));
    let rows = 0;
    for (const [l, kinds] of Object.entries(choice!.bits)) {
      for (const [kind, bits] of Object.entries(kinds)) {
        const spec = resolved.scheme!.layers[l].saved![kind as 'qkv_input']!;
        const gemmX = ['qkv_input', 'mlp_input', 'down_input'].includes(kind);
        if (bits === 8) expect(spec.granularity, `layer ${l} ${kind}`).toBe(gemmX ? 'row' : 'group');
        if (bits === 8 && gemmX) rows++;
      }
    }
    expect(rows, 'the budget picks 8 bits for some GEMM input').toBeGreaterThan(0);
  });
  it('keeps bf16 attention cells bf16 (pinned at 16 bits) and still fits the budget', () => {
    const budget = Math.floor(fp32 * 0.6);
    const bf16 = { format: 'bf16' } as const;
    const scheme = parseScheme({ name: 'budget-bf16', layer: { saved: { attn_qkv: bf16, attn_out: bf16 } }, budget_bytes: budget });
    const { opts: resolved, budget: choice } = resolveTrainingPlan(defaultTrainOptions('small', { scheme }));
    expect(planMemory(resolved).total).toBeLessThanOrEqual(budget);
    for (const [l, k] of Object.entries(choice!.bits)) {
      expect([k.attn_qkv, k.attn_out], `layer ${l}`).toEqual([16, 16]);
      const saved = resolved.scheme!.layers[l].saved!;
      expect([saved.attn_qkv?.format, saved.attn_out?.format], `layer ${l}`).toEqual(['bf16', 'bf16']);
      for (const [kind, b] of Object.entries(k)) if (kind !== 'attn_qkv' && kind !== 'attn_out') expect([4, 8, 32]).toContain(b);
    }
  });
  it('explains an infeasible budget', () => {
    expect(() => resolveTrainingPlan(defaultTrainOptions('small', { scheme: withBudget(10_000_000) }))).toThrow(/infeasible.*at least/s);
  });
});
