/** The page's LoRA fine-tuning (issue 39 item 4): the form's spec, validation, labels, planned memory, import, resume, merged export. */
import { describe, expect, it } from 'vitest';
import { loadCheckpoint, saveCheckpoint } from '../../src/engine/io/checkpoint';
import { mergeLora } from '../../src/engine/lora/merge';
import { initLoraTensors, LORA_TARGETS, loraParamSpecs, type LoraSpec } from '../../src/engine/lora/spec';
import { type ModelConfig, paramSpecs, PRESETS } from '../../src/engine/model/config';
import { Rng } from '../../src/engine/util/rng';
import { baselineConfig, baselineScheme, findBaseline } from '../../src/state/baseline';
import { runConfigProblem } from '../../src/state/explain';
import { newRun, runLabel, runPlannedMemory } from '../../src/state/runs';
import { mergedExportFiles } from '../../src/worker/checkpoint-archive';
import { initOfImport, initOfResume } from '../../src/worker/checkpoint-files';
import { DEFAULT_LORA, DEFAULT_RUN_CONFIG, loraLabel, type RunConfig, runSpecOfConfig, sameLoraSpec, trainOptionsFor } from '../../src/worker/protocol';

const micro = PRESETS.micro;

function initParams(c: ModelConfig, seed: number): Map<string, Float32Array> {
  const rng = new Rng(seed);
  return new Map(paramSpecs(c).map((s) => [s.name, rng.normalArray(s.shape.reduce((a, b) => a * b, 1), 0.02)]));
}
const lora4: LoraSpec = { rank: 4, alpha: 8, dropout: 0, targets: [...LORA_TARGETS] };

/** A LoRA run's checkpoint files: the frozen base, adapters with B ≠ 0 (so merging changes the weights), their moments. */
function loraCheckpointFiles(spec: LoraSpec): Record<string, Uint8Array | string> {
  const params = initParams(micro, 1);
  const tensors = initLoraTensors(micro, spec, 2);
  for (const [name, t] of tensors) if (name.endsWith('lora_B.weight')) t.forEach((_, i) => (t[i] = 0.01 * ((i % 7) - 3)));
  const zeros = new Map(loraParamSpecs(micro, spec).map((s) => [s.name, new Float32Array(s.shape[0] * s.shape[1])]));
  return { ...saveCheckpoint({ config: micro, params, adapters: { spec, tensors }, extra: { optimizer: { m: zeros, v: zeros, step: 3 } } }) };
}

describe('LoRA in the run form', () => {
  it('puts the form\'s LoRA into the run spec and the training options (absent for full fine-tuning)', () => {
    const c: RunConfig = { ...DEFAULT_RUN_CONFIG, lora: lora4 };
    expect(runSpecOfConfig(c).lora).toEqual(lora4);
    expect(trainOptionsFor(c).lora).toEqual(lora4);
    expect(runSpecOfConfig(DEFAULT_RUN_CONFIG).lora).toBeUndefined();
    expect(DEFAULT_LORA).toEqual({ rank: 16, alpha: 32, dropout: 0, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] });
  });

  it('refuses no targets and a rank larger than a layer\'s side, in words; allows LoRA on a from-scratch model', () => {
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: { ...lora4, targets: [] } })).toBe('LoRA needs at least one target layer (q, k, v, o, gate, up, down)');
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: { ...lora4, rank: 0 } })).toMatch(/LoRA rank must be a whole number ≥ 1/);
    const side = Math.min(micro.hidden_size, micro.num_key_value_heads * (micro.hidden_size / micro.num_attention_heads));
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: { ...lora4, rank: side + 1 } })).toMatch(new RegExp(`LoRA rank ${side + 1} exceeds model\\.layers\\.0\\.self_attn\\.\\w+_proj's smaller side ${side}`));
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: { ...lora4, dropout: 1 } })).toMatch(/dropout must be in \[0, 1\)/);
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, lora: lora4 })).toBeNull();
  });

  it('labels LoRA runs with rank and targets (alpha and dropout only when not the default)', () => {
    expect(loraLabel(DEFAULT_LORA)).toBe('LoRA r16 · q,k,v,o,gate,up,down');
    expect(loraLabel({ rank: 8, alpha: 8, dropout: 0.05, targets: ['v', 'q'] })).toBe('LoRA r8 α8 drop 0.05 · q,v');
    expect(runLabel({ ...DEFAULT_RUN_CONFIG, lora: lora4 })).toBe('micro · fp32 · LoRA r4 · q,k,v,o,gate,up,down · b8 · t64'.replace('b8 · t64', `b${DEFAULT_RUN_CONFIG.batch} · t${DEFAULT_RUN_CONFIG.seq}`));
    expect(newRun('a', { ...DEFAULT_RUN_CONFIG, lora: lora4 }, 0).label).toContain('LoRA r4');
    expect(runLabel(DEFAULT_RUN_CONFIG)).not.toContain('LoRA');
  });

  it('prices the frozen base in the planned memory: grads and optimizer are the adapters\' only', () => {
    const full = runPlannedMemory(DEFAULT_RUN_CONFIG)!;
    const lora = runPlannedMemory({ ...DEFAULT_RUN_CONFIG, lora: lora4 })!;
    const adapterBytes = 4 * loraParamSpecs(micro, lora4).reduce((n, s) => n + s.shape[0] * s.shape[1], 0);
    expect(lora.total).toBeLessThan(full.total);
    expect(lora.optimizer).toBe(2 * adapterBytes);
    expect(lora.optimizer).toBeLessThan(full.optimizer);
    expect(lora.grads).toBeLessThan(full.grads);
    expect(runPlannedMemory({ ...DEFAULT_RUN_CONFIG, lora: { ...lora4, rank: 10_000 } })).toBeNull();
  });

  it('keeps LoRA in a run\'s baseline: a LoRA f16 run\'s baseline is the same LoRA in fp32, not full fine-tuning', () => {
    const f16 = baselineScheme('f16')!;
    const loraF16 = newRun('l16', { ...DEFAULT_RUN_CONFIG, lora: lora4, scheme: f16 }, 0);
    expect(baselineConfig(loraF16.config, 'fp32').lora).toEqual(lora4);
    const full = newRun('full', DEFAULT_RUN_CONFIG, 0);
    const lora32 = newRun('l32', { ...DEFAULT_RUN_CONFIG, lora: lora4 }, 0);
    expect(findBaseline(loraF16, [full], 'fp32')).toBeNull();
    expect(findBaseline(loraF16, [full, lora32], 'fp32')?.id).toBe('l32');
  });

  it('compares LoRA settings regardless of target order', () => {
    expect(sameLoraSpec(lora4, { ...lora4, targets: [...lora4.targets].reverse() })).toBe(true);
    expect(sameLoraSpec(lora4, { ...lora4, rank: 8 })).toBe(false);
    expect(sameLoraSpec(lora4, { ...lora4, targets: ['q'] })).toBe(false);
  });
});

describe('a LoRA run\'s checkpoint in the page', () => {
  it('resumes with its adapters and their moments, the base frozen', () => {
    const ck = loadCheckpoint(loraCheckpointFiles(lora4));
    const init = initOfResume(ck);
    expect(init.adapters).toBe(ck.adapters!.tensors);
    expect(init.params).toBe(ck.params);
    expect(init.optimizer!.step).toBe(3);
    expect([...init.optimizer!.m.keys()].sort()).toEqual([...init.adapters!.keys()].sort());
    // A full run's checkpoint has none.
    expect(initOfResume(loadCheckpoint({ ...saveCheckpoint({ config: micro, params: initParams(micro, 1) }) })).adapters).toBeUndefined();
  });

  it('imported again: continues the adapters under the same LoRA, else trains the merged model', () => {
    const ck = loadCheckpoint(loraCheckpointFiles(lora4));
    const same = initOfImport(ck, { ...lora4, targets: [...lora4.targets].reverse() });
    expect(same.adapters).toBe(ck.adapters!.tensors);
    expect(same.params).toBe(ck.params);
    const merged = mergeLora(micro, lora4, ck.params, ck.adapters!.tensors);
    for (const lora of [undefined, { ...lora4, rank: 2, alpha: 4 }]) {
      const got = initOfImport(ck, lora);
      expect(got.adapters).toBeUndefined();
      expect(got.params!.get('model.layers.0.self_attn.q_proj.weight')).toEqual(merged.get('model.layers.0.self_attn.q_proj.weight'));
    }
  });

  it('exports the adapter as PEFT files beside the base, or the merged full model', () => {
    const files = loraCheckpointFiles(lora4);
    expect(Object.keys(files)).toEqual(expect.arrayContaining(['model.safetensors', 'config.json', 'adapter_config.json', 'adapter_model.safetensors']));
    const out = mergedExportFiles(files);
    expect(out['adapter_config.json']).toBeUndefined();
    expect(out['adapter_model.safetensors']).toBeUndefined();
    expect(out['config.json']).toBe(files['config.json']);
    const ck = loadCheckpoint(files);
    const back = loadCheckpoint(out);
    expect(back.adapters).toBeUndefined();
    const want = mergeLora(micro, lora4, ck.params, ck.adapters!.tensors);
    const name = 'model.layers.1.mlp.down_proj.weight';
    expect(back.params.get(name)).toEqual(want.get(name));
    expect(back.params.get(name)).not.toEqual(ck.params.get(name));
    expect(() => mergedExportFiles(saveCheckpoint({ config: micro, params: ck.params }))).toThrow(/no LoRA adapters/);
  });
});
