/** Activation checkpointing in the page's run form (issue 39's memory): the form's choice in the spec, its refusals in words, label and planned memory. */
import { describe, expect, it } from 'vitest';
import { LORA_TARGETS, type LoraSpec } from '../../src/engine/lora/spec';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { runConfigProblem } from '../../src/state/explain';
import { runLabel, runPlannedMemory } from '../../src/state/runs';
import { DEFAULT_RUN_CONFIG, type RunConfig, runSpecOfConfig, trainOptionsFor } from '../../src/worker/protocol';

const lora4: LoraSpec = { rank: 4, alpha: 8, dropout: 0, targets: [...LORA_TARGETS] };
const on: RunConfig = { ...DEFAULT_RUN_CONFIG, checkpointActivations: true };

describe('activation checkpointing in the run form', () => {
  it('puts the choice into the run spec and the training options, and leaves it out when off', () => {
    expect(runSpecOfConfig(on).checkpointActivations).toBe(true);
    expect(trainOptionsFor(on).checkpointActivations).toBe(true);
    expect(runSpecOfConfig(DEFAULT_RUN_CONFIG).checkpointActivations).toBeUndefined();
    expect(runLabel(on)).toContain('· recompute');
    expect(runLabel(DEFAULT_RUN_CONFIG)).not.toContain('recompute');
  });

  it('is accepted with fp32 and f16 compute, with LoRA, and refused in words over quantized saved activations', () => {
    expect(runConfigProblem(on)).toBeNull();
    expect(runConfigProblem({ ...on, scheme: SCHEME_PRESETS.f16 })).toBeNull();
    expect(runConfigProblem({ ...on, lora: lora4 })).toBeNull();
    const p = runConfigProblem({ ...on, scheme: SCHEME_PRESETS.agoq });
    expect(p).toMatch(/checkpoint/i);
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, scheme: SCHEME_PRESETS.agoq })).toBeNull();
  });

  it('plans less activation memory and the same everything else', () => {
    const off = runPlannedMemory(DEFAULT_RUN_CONFIG)!;
    const ck = runPlannedMemory(on)!;
    expect(ck.activations).toBeLessThan(off.activations);
    expect(ck.weights).toBe(off.weights);
    expect(ck.optimizer).toBe(off.optimizer);
  });
});
