/**
 * The trainer resolves its run once: built from a plan it calls no resolver at all (neither the run's
 * entry, nor the model's plan, nor the budget), and built from options it resolves exactly once; the
 * model it builds is the plan's, and the ledger equals the plan's prediction.
 */
import { describe, expect, it, vi } from 'vitest';
import * as runPlan from '../../src/engine/plan/run-plan';
import * as budget from '../../src/engine/plan/budget';
import * as trainPlan from '../../src/engine/plan/train-plan';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

vi.mock('../../src/engine/plan/run-plan', async (importOriginal) => {
  const m = await importOriginal<typeof import('../../src/engine/plan/run-plan')>();
  return { ...m, resolvePlan: vi.fn(m.resolvePlan) };
});
vi.mock('../../src/engine/plan/budget', async (importOriginal) => {
  const m = await importOriginal<typeof import('../../src/engine/plan/budget')>();
  return { ...m, resolveBudget: vi.fn(m.resolveBudget) };
});
vi.mock('../../src/engine/plan/train-plan', async (importOriginal) => {
  const m = await importOriginal<typeof import('../../src/engine/plan/train-plan')>();
  return { ...m, resolveTrainingPlan: vi.fn(m.resolveTrainingPlan) };
});

const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
const tok = CharTokenizer.fromText(text);
const budgetScheme = parseScheme({
  name: 'budget', layer: { saved: { attn_qkv: { format: 'fp32' }, attn_out: { format: 'fp32' } } }, budget_bytes: 800_000,
});
const opts = defaultTrainOptions('micro', { steps: 2, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize }, scheme: budgetScheme });

const calls = () => ({
  entry: vi.mocked(trainPlan.resolveTrainingPlan).mock.calls.length,
  model: vi.mocked(runPlan.resolvePlan).mock.calls.length,
  budget: vi.mocked(budget.resolveBudget).mock.calls.length,
});

describe('the trainer resolves once', () => {
  it('built from a plan, it resolves nothing; built from options, it resolves once (the budget solved once)', async () => {
    const rt = await testRuntime();
    const plan = trainPlan.resolveTrainingPlan(opts);
    expect(plan.budget).not.toBeNull();
    vi.clearAllMocks();
    const fromPlan = await Trainer.create(rt, opts, text, { tokenizer: tok, plan });
    try {
      expect(calls()).toEqual({ entry: 0, model: 0, budget: 0 });
      expect(fromPlan.plan).toBe(plan);
      expect(fromPlan.model.plan).toBe(plan.model);
      expect(fromPlan.opts).toBe(plan.opts);
      expect(fromPlan.budgetChoice).toBe(plan.budget);
      await fromPlan.trainStep();
      expect(fromPlan.memory()).toEqual(plan.memory);
      expect(calls()).toEqual({ entry: 0, model: 0, budget: 0 });
    } finally {
      fromPlan.destroy();
    }

    vi.clearAllMocks();
    const fromOpts = await Trainer.create(rt, opts, text, { tokenizer: tok });
    try {
      expect(calls().entry).toBe(1);
      expect(calls().budget).toBe(1);
      expect(fromOpts.memory()).toEqual(fromOpts.plan.memory);
      expect(fromOpts.plan.memory).toEqual(plan.memory);
    } finally {
      fromOpts.destroy();
    }
  }, 240_000);

  it('refuses a plan made for another vocabulary', async () => {
    const rt = await testRuntime();
    const plan = trainPlan.resolveTrainingPlan({ ...opts, model: { ...opts.model, vocab_size: tok.vocabSize + 3 } });
    await expect(Trainer.create(rt, opts, text, { tokenizer: tok, plan })).rejects.toThrow(/vocabulary/);
  });
});
