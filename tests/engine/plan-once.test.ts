/**
 * One plan, resolved once (issue 34): the resolver module (src/engine/plan: the entry train-plan.ts,
 * the model's plan run-plan.ts, the budget budget.ts) is the only caller of resolvePlan and resolveBudget in src/, the budget
 * is solved at one call site, nothing reads TrainOptions' raw scheme once a plan exists, and the
 * plan is deeply frozen. The grep half keeps the tree honest as it changes.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';

const SRC = path.resolve(__dirname, '../../src');

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = path.join(dir, f);
    return statSync(p).isDirectory() ? sources(p) : /\.tsx?$/.test(f) ? [p] : [];
  });
}

/** Every `file:line: text` in src/ whose code (comments dropped) matches `re`. */
function grep(re: RegExp): string[] {
  return sources(SRC).flatMap((file) => readFileSync(file, 'utf8').split('\n').flatMap((line, i) => {
    const code = line.replace(/\/\/.*$/, '').replace(/^\s*\*.*$/, '').replace(/^\s*\/\*\*.*$/, '');
    return re.test(code) ? [`${path.relative(SRC, file)}:${i + 1}: ${line.trim()}`] : [];
  }));
}

const RESOLVER = /^engine\/plan\//;

describe('one plan, resolved once', () => {
  it('resolvePlan and resolveBudget are called only inside the resolver (src/engine/plan)', () => {
    expect(grep(/\bresolve(?:Plan|Budget)\(/).filter((l) => !RESOLVER.test(l))).toEqual([]);
  });

  it('the memory budget is solved at one call site (resolveTrainingPlan)', () => {
    const calls = grep(/\bresolveBudget\(/).filter((l) => !/export function resolveBudget\(/.test(l));
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatch(/^engine\/plan\/train-plan\.ts:/);
  });

  it('nothing reads the raw scheme of TrainOptions once a plan exists', () => {
    // A built run's options: the trainer's, a plan's (read plan.scheme, plan.model, plan.wire instead).
    expect(grep(/\b(?:trainer|this|plan)\.opts\.scheme\b/)).toEqual([]);
    // The engine and the parallel layer get options only to resolve them (the spec and the options' own defaults build them).
    const built = grep(/\b(?:opts|rawOpts|options)\.scheme\b/).filter((l) => /^(?:engine|parallel)\//.test(l))
      .filter((l) => !RESOLVER.test(l) && !/^engine\/run\/|^engine\/train\/options\.ts:/.test(l));
    expect(built).toEqual([]);
    // The scheme-reading shortcuts that bypassed the plan are gone.
    expect(grep(/\bschemeUsesInt8\b|\bresolveBudgetOptions\b|\btrainerBufferPlan\b/)).toEqual([]);
  });

  it('the plan is deeply frozen', () => {
    const plan = resolveTrainingPlan(defaultTrainOptions('micro', { scheme: SCHEME_PRESETS.agoq }));
    for (const x of [plan, plan.opts, plan.opts.model, plan.scheme, plan.model, plan.model.layers, plan.model.layers[0], plan.model.layers[0].compute,
      plan.model.buffers, plan.buffers, plan.buffers[0], plan.memory, plan.wire, plan.wire.dp, plan.model.layout.views[0]]) {
      expect(Object.isFrozen(x)).toBe(true);
    }
    expect(() => {
      (plan.memory as { total: number }).total = 0;
    }).toThrow(TypeError);
    expect(() => (plan.buffers as unknown[]).push({})).toThrow(TypeError);
  });

  it('does not freeze or change the caller\'s options, and solves a budget into the plan', () => {
    const opts = defaultTrainOptions('micro', { batch: 2, seq: 16, scheme: parseScheme({
      name: 'budget', layer: { saved: { attn_qkv: { format: 'fp32' }, attn_out: { format: 'fp32' } } }, budget_bytes: 800_000,
    }) });
    const plan = resolveTrainingPlan(opts);
    expect(Object.isFrozen(opts.model)).toBe(false);
    expect(opts.scheme?.budget_bytes).toBe(800_000);
    expect(plan.opts.scheme?.budget_bytes).toBeUndefined();
    expect(plan.budget?.planned).toEqual(plan.memory);
    expect(plan.memory.total).toBeLessThanOrEqual(800_000);
  });

  it('holds the wire formats of DP, DiLoCo and TP and whether INT8 tensor cores are wanted', () => {
    const micro = { model: PRESETS.micro, batch: 2, seq: 16 };
    const fp32 = resolveTrainingPlan(micro);
    expect(fp32.wire).toEqual({ dp: { members: 1, format: 'fp32' }, diloco: null, tp: null });
    expect(fp32.int8TensorCores).toBe(false);
    expect(fp32.scheme.name).toBe('fp32');
    const int8 = resolveTrainingPlan({ ...micro, scheme: SCHEME_PRESETS.int8 }, { dpMembers: 3, diloco: { wire: 'int4' } });
    expect(int8.wire.dp.members).toBe(3);
    expect(int8.wire.diloco).toBe('int4');
    expect(int8.int8TensorCores).toBe(true);
    const taco = resolveTrainingPlan({ ...micro, scheme: SCHEME_PRESETS['taco-tp2'] });
    expect(taco.wire.tp).toEqual({ degree: 2, codec: SCHEME_PRESETS['taco-tp2'].tp.codec, group: SCHEME_PRESETS['taco-tp2'].tp.group });
  });
});
