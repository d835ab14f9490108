/** QLoRA in the page's run form (issue 39 items 2 and 4): the form's base choice in the spec, its refusals, label, baseline and planned memory. */
import { describe, expect, it } from 'vitest';
import { defaultQloraSpec } from '../../src/engine/lora/qlora/plan';
import { LORA_TARGETS, type LoraSpec } from '../../src/engine/lora/spec';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { baselineConfig, findBaseline } from '../../src/state/baseline';
import { runConfigProblem } from '../../src/state/explain';
import { newRun, runLabel, runPlannedMemory } from '../../src/state/runs';
import { DEFAULT_RUN_CONFIG, type RunConfig, runSpecOfConfig, trainOptionsFor } from '../../src/worker/protocol';

const lora4: LoraSpec = { rank: 4, alpha: 8, dropout: 0, targets: [...LORA_TARGETS] };
const int4 = defaultQloraSpec('int4');

describe('QLoRA in the run form', () => {
  it('puts the base choice into the spec only under LoRA', () => {
    const c: RunConfig = { ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 };
    expect(runSpecOfConfig(c).qlora).toEqual(int4);
    expect(trainOptionsFor(c).qlora).toEqual(int4);
    // Full fine-tuning ignores a base choice the form kept.
    expect(runSpecOfConfig({ ...DEFAULT_RUN_CONFIG, qlora: int4 }).qlora).toBeUndefined();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, qlora: int4 })).toBeNull();
  });

  it('takes fp32 or f16 compute over a quantized base and refuses INT8 compute, in words', () => {
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 })).toBeNull();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4, scheme: SCHEME_PRESETS.f16 })).toBeNull();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4, scheme: SCHEME_PRESETS.int8 })).toMatch(/QLoRA runs the quantized base's GEMMs in fp32 or f16 .* INT8/);
  });

  it('labels the base, takes LoRA over the fp32 base as its baseline, and plans smaller weights', () => {
    expect(runLabel({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 })).toContain('LoRA r4 · q,k,v,o,gate,up,down · int4 base');
    expect(runLabel({ ...DEFAULT_RUN_CONFIG, lora: lora4 })).not.toContain('base');
    // Its baseline is the same LoRA over the fp32 base (the quantized base's cost in loss), not itself.
    expect(baselineConfig({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 }, 'fp32')).toEqual(baselineConfig({ ...DEFAULT_RUN_CONFIG, lora: lora4 }, 'fp32'));
    const q = newRun('q', { ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 }, 0);
    const l = newRun('l', { ...DEFAULT_RUN_CONFIG, lora: lora4 }, 0);
    expect(findBaseline(q, [q, l], 'fp32')?.id).toBe('l');
    expect(findBaseline(l, [q, l], 'fp32')).toBeNull();
    const lora = runPlannedMemory({ ...DEFAULT_RUN_CONFIG, lora: lora4 })!;
    const q8 = runPlannedMemory({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: defaultQloraSpec('int8') })!;
    const q4 = runPlannedMemory({ ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: int4 })!;
    expect(q4.weights).toBeLessThan(q8.weights);
    expect(q8.weights).toBeLessThan(lora.weights);
  });

  it('an NF4 base: in the spec, labelled, planned at INT4\'s size', () => {
    const nf4 = defaultQloraSpec('nf4');
    const c: RunConfig = { ...DEFAULT_RUN_CONFIG, lora: lora4, qlora: nf4 };
    expect(runSpecOfConfig(c).qlora).toEqual({ format: 'nf4', group: 64 });
    expect(runConfigProblem(c)).toBeNull();
    expect(runLabel(c)).toContain('· nf4 base');
    expect(runPlannedMemory(c)!.weights).toBe(runPlannedMemory({ ...c, qlora: int4 })!.weights);
  });
});
