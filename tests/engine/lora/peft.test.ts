import { describe, expect, it } from 'vitest';
import { exportPeftAdapter, importPeftAdapter, peftAdapterConfig, pyFloatRepr, type PeftFilesIn } from '../../../src/engine/lora/peft';
import { initLoraTensors, loraAdapters, type LoraSpec } from '../../../src/engine/lora/spec';
import { readSafetensors, writeSafetensors, type SafeTensorIn } from '../../../src/engine/io/safetensors';
import { validateModelConfig } from '../../../src/engine/model/config';
import { Rng } from '../../../src/engine/util/rng';

const cfg = validateModelConfig({
  vocab_size: 96, hidden_size: 64, intermediate_size: 176, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  max_position_embeddings: 64, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: false, initializer_range: 0.02,
});
const spec: LoraSpec = { rank: 4, alpha: 8, dropout: 0.05, targets: ['q', 'v', 'down'] };

function tensors(s: LoraSpec = spec, seed = 1): Map<string, Float32Array> {
  const t = initLoraTensors(cfg, s, seed);
  const rng = new Rng(seed + 100);
  for (const a of loraAdapters(cfg, s)) t.set(a.b, rng.normalArray(a.out * s.rank, 0.01));
  return t;
}

const files = (s = spec) => exportPeftAdapter(cfg, s, tensors(s), { baseModel: 'HuggingFaceTB/SmolLM2-135M' }) as unknown as PeftFilesIn;
const withConfig = (patch: Record<string, unknown>, f = files()): PeftFilesIn =>
  ({ ...f, 'adapter_config.json': JSON.stringify({ ...JSON.parse(f['adapter_config.json'] as string), ...patch }) });
/** The same adapter file with its tensors rewritten by `edit` (PEFT names). */
function withTensors(edit: (t: SafeTensorIn[]) => SafeTensorIn[], f = files()): PeftFilesIn {
  const st = readSafetensors(f['adapter_model.safetensors'] as Uint8Array);
  const list = [...st.tensors].map(([name, t]) => ({ name, dtype: t.dtype, shape: t.shape, data: t.data }));
  return { ...f, 'adapter_model.safetensors': writeSafetensors(edit(list), { format: 'pt' }) };
}
const errorOf = (f: () => unknown): string => {
  try {
    f();
  } catch (e) {
    return (e as Error).message;
  }
  throw new Error('expected an error');
};

describe('PEFT adapter export', () => {
  it('writes adapter_config.json as PEFT does: json.dumps(indent=2, sort_keys=True), LoraConfig 0.10 keys, no trailing newline', () => {
    expect(files()['adapter_config.json']).toBe(`{
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M",
  "bias": "none",
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": 8,
  "lora_dropout": 0.05,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": 4,
  "rank_pattern": {},
  "revision": null,
  "target_modules": [
    "q_proj",
    "v_proj",
    "down_proj"
  ],
  "task_type": "CAUSAL_LM",
  "use_dora": false,
  "use_rslora": false
}`);
    const c = peftAdapterConfig({ ...spec, dropout: 0, alpha: 2.5 }, { baseModel: 'naïve/model' });
    expect(c.base_model_name_or_path).toBe('naïve/model');
    const text = exportPeftAdapter(cfg, { ...spec, dropout: 0, alpha: 2.5 }, tensors(), { baseModel: 'naïve/model' })['adapter_config.json'];
    expect(text).toContain('"lora_dropout": 0.0,');
    expect(text).toContain('"lora_alpha": 2.5,');
    expect(text).toContain('"base_model_name_or_path": "na\\u00efve/model",');
    expect(exportPeftAdapter(cfg, spec, tensors())['adapter_config.json']).toContain('"base_model_name_or_path": null,');
  });

  it("formats floats as Python's repr", () => {
    const cases: [number, string][] = [
      [0, '0.0'], [0.05, '0.05'], [1e-5, '1e-05'], [0.0001, '0.0001'], [0.1 + 0.2, '0.30000000000000004'], [-2.5, '-2.5'],
      [1e15, '1000000000000000.0'], [1e16, '1e+16'], [1.5e16, '1.5e+16'], [123.456, '123.456'], [5e-324, '5e-324'],
      [1.7976931348623157e308, '1.7976931348623157e+308'], [12345678.9, '12345678.9'], [0.00012, '0.00012'], [1.23e-7, '1.23e-07'],
    ];
    for (const [x, want] of cases) expect(pyFloatRepr(x), String(x)).toBe(want);
  });

  it("writes the tensors under PEFT's names, F32, [r, in] and [out, r], metadata format pt", () => {
    const st = readSafetensors(files()['adapter_model.safetensors'] as Uint8Array);
    expect(st.metadata).toEqual({ format: 'pt' });
    expect(st.tensors.size).toBe(2 * 3 * 2);
    expect(st.tensors.get('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight')?.shape).toEqual([4, 64]);
    expect(st.tensors.get('base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight')?.shape).toEqual([32, 4]);
    expect(st.tensors.get('base_model.model.model.layers.1.mlp.down_proj.lora_A.weight')?.shape).toEqual([4, 176]);
    expect([...st.tensors.values()].every((t) => t.dtype === 'F32')).toBe(true);
  });

  it('refuses tensors that do not match the spec, naming each', () => {
    const t = tensors();
    t.delete('model.layers.0.self_attn.q_proj.lora_A.weight');
    t.set('model.layers.0.self_attn.v_proj.lora_B.weight', new Float32Array(5));
    t.set('model.layers.0.self_attn.k_proj.lora_A.weight', new Float32Array(256));
    const msg = errorOf(() => exportPeftAdapter(cfg, spec, t));
    expect(msg).toContain('missing 1: model.layers.0.self_attn.q_proj.lora_A.weight [4, 64]');
    expect(msg).toContain('unexpected 1: model.layers.0.self_attn.k_proj.lora_A.weight');
    expect(msg).toContain('model.layers.0.self_attn.v_proj.lora_B.weight: 5 elements, want [32, 4]');
  });
});

describe('PEFT adapter import', () => {
  it('round trip: export → import gives the same spec and tensors', () => {
    for (const s of [spec, { rank: 8, alpha: 16, dropout: 0, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] } as LoraSpec]) {
      const t = tensors(s, 7);
      const got = importPeftAdapter(cfg, exportPeftAdapter(cfg, s, t, { baseModel: 'x/y' }) as unknown as PeftFilesIn);
      expect(got.spec).toEqual(s);
      expect(got.baseModel).toBe('x/y');
      expect(got.ignoredKeys).toEqual([]);
      expect([...got.tensors.keys()].sort()).toEqual([...t.keys()].sort());
      for (const [n, a] of t) expect(got.tensors.get(n)).toEqual(a);
    }
  });

  it('reads the configs newer PEFT writes (0.17 keys, peft_version) and the JSON as bytes; unknown keys are reported, not fatal', () => {
    const peft017 = {
      exclude_modules: null, trainable_token_indices: null, eva_config: null, corda_config: null, use_qalora: false, qalora_group_size: 16,
      lora_bias: false, target_parameters: null, peft_version: '0.17.0', layers_pattern: null,
    };
    const f = withConfig(peft017);
    const got = importPeftAdapter(cfg, { ...f, 'adapter_config.json': new TextEncoder().encode(f['adapter_config.json'] as string) });
    expect(got.spec).toEqual(spec);
    expect(got.ignoredKeys).toEqual([]);
    expect(importPeftAdapter(cfg, withConfig({ some_future_option: null })).ignoredKeys).toEqual(['some_future_option']);
  });

  it("matches target_modules as PEFT does: suffixes, a regex, 'all-linear'", () => {
    expect(importPeftAdapter(cfg, withConfig({ target_modules: ['self_attn.q_proj', 'v_proj', 'mlp.down_proj'] })).spec.targets).toEqual(['q', 'v', 'down']);
    expect(importPeftAdapter(cfg, withConfig({ target_modules: String.raw`.*\.(q_proj|v_proj|down_proj)` })).spec.targets).toEqual(['q', 'v', 'down']);
    const all: LoraSpec = { ...spec, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] };
    expect(importPeftAdapter(cfg, withConfig({ target_modules: 'all-linear' }, files(all))).spec.targets).toEqual(all.targets);
  });

  it('converts BF16 and F16 tensors to F32', () => {
    for (const dtype of ['BF16', 'F16'] as const) {
      // 1.5 · 2^-k values are exact in both formats.
      const f = withTensors((list) => list.map((t) => ({ ...t, dtype, data: new Uint16Array(t.shape[0] * t.shape[1]).fill(dtype === 'BF16' ? 0x3c40 : 0x2600) })));
      const got = importPeftAdapter(cfg, f);
      expect(got.tensors.get('model.layers.0.self_attn.q_proj.lora_A.weight')![0]).toBe(dtype === 'BF16' ? 0.01171875 : 0.0234375);
    }
  });

  it('refuses other adapter types and tasks', () => {
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ peft_type: 'IA3' })))).toMatch(/peft_type "IA3" is not supported \(only "LORA" adapters\)/);
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ task_type: 'SEQ_CLS' })))).toMatch(/task_type "SEQ_CLS" is not supported/);
  });

  it('refuses every option this lab cannot run exactly, all in one message', () => {
    const msg = errorOf(() => importPeftAdapter(cfg, withConfig({
      use_dora: true, use_rslora: true, rank_pattern: { q_proj: 8 }, alpha_pattern: { v_proj: 32 }, modules_to_save: ['lm_head'],
      bias: 'all', fan_in_fan_out: true, init_lora_weights: 'pissa', lora_bias: true, layer_replication: [[0, 2]],
    })));
    expect(msg).toMatch(/^adapter_config\.json describes an adapter this lab cannot use:/);
    for (const s of ['use_dora true', 'use_rslora true', 'rank_pattern {"q_proj":8}', 'alpha_pattern {"v_proj":32}', 'modules_to_save ["lm_head"]',
      'bias "all"', 'fan_in_fan_out true', 'init_lora_weights "pissa" (this init changes the base weights', 'lora_bias true', 'layer_replication']) {
      expect(msg).toContain(s);
    }
  });

  it('refuses target modules that are unknown, not linear layers, or not on every layer', () => {
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ target_modules: ['q_proj', 'v_proj', 'down_proj', 'c_attn'] }))))
      .toContain('target_modules name modules a Llama model does not have: c_attn');
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ target_modules: ['q_proj', 'v_proj', 'down_proj', 'lm_head'] }))))
      .toContain('target_modules adapt lm_head: only the linear layers');
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ layers_to_transform: [1] }))))
      .toContain('the config adapts q_proj in 1 of 2 layers: adapters must sit on every layer');
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ target_modules: String.raw`.*layers\.0\..*(q_proj|v_proj|down_proj)` }))))
      .toContain('adapts v_proj in 1 of 2 layers');
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ target_modules: '(' })))).toContain('is not a regular expression');
  });

  it('refuses tensors that do not match target_modules: missing and extra ones', () => {
    // The config says q and v only: the down_proj tensors are extra.
    const extra = errorOf(() => importPeftAdapter(cfg, withConfig({ target_modules: ['q_proj', 'v_proj'] })));
    expect(extra).toMatch(/unexpected 4 \(not adapters of the config's target_modules on this model\): base_model\.model\.model\.layers\.0\.mlp\.down_proj\.lora_A\.weight \[4, 176\]/);
    const missing = errorOf(() => importPeftAdapter(cfg, withTensors((l) => l.filter((t) => !t.name.includes('layers.1.self_attn.q_proj.lora_B')))));
    expect(missing).toContain('missing 1: base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight [64, 4]');
    const unprefixed = errorOf(() => importPeftAdapter(cfg, withTensors((l) => l.map((t) => ({ ...t, name: t.name.replace('base_model.model.', '') })))));
    expect(unprefixed).toContain(`(PEFT's names start with "base_model.model.")`);
  });

  it('refuses shapes that do not match the rank or the model', () => {
    const rank = errorOf(() => importPeftAdapter(cfg, withConfig({ r: 8 })));
    expect(rank).toContain('base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight: [4, 64], want [8, 64]');
    expect(rank).toContain('with r 8 from adapter_config.json');
    const other = validateModelConfig({ ...cfg, hidden_size: 32, num_attention_heads: 2, num_key_value_heads: 1 });
    const model = errorOf(() => importPeftAdapter(other, files()));
    expect(model).toContain('lora_A.weight: [4, 64], want [4, 32]');
    expect(model).toContain('was the adapter made for another model?');
    expect(model).toContain('(2 layers, hidden 32, k/v width 16, intermediate 176)');
    expect(errorOf(() => importPeftAdapter(cfg, withConfig({ r: 40 })))).toContain('LoRA rank 40 exceeds model.layers.0.self_attn.v_proj\'s smaller side 32');
  });

  it('refuses other dtypes and non-finite values', () => {
    const f64 = withTensors((l) => l.map((t) => (t.name.endsWith('layers.0.self_attn.q_proj.lora_A.weight')
      ? { ...t, dtype: 'F64' as const, data: new Float64Array(t.shape[0] * t.shape[1]) } : t)));
    expect(errorOf(() => importPeftAdapter(cfg, f64))).toContain('q_proj.lora_A.weight has dtype F64, want F32 (or F16/BF16)');
    const nan = withTensors((l) => l.map((t) => (t.name.endsWith('layers.1.mlp.down_proj.lora_B.weight')
      ? { ...t, data: new Float32Array(t.shape[0] * t.shape[1]).fill(NaN) } : t)));
    expect(errorOf(() => importPeftAdapter(cfg, nan))).toContain('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight holds non-finite values');
  });

  it('says what is wrong with the files themselves', () => {
    const f = files();
    const bytes = f['adapter_model.safetensors'] as Uint8Array;
    expect(errorOf(() => importPeftAdapter(cfg, { ...f, 'adapter_model.safetensors': bytes.subarray(0, bytes.length - 10) }))).toMatch(/^adapter_model\.safetensors: safetensors: /);
    expect(errorOf(() => importPeftAdapter(cfg, { 'adapter_config.json': f['adapter_config.json'], 'adapter_model.bin': new Uint8Array(4) })))
      .toMatch(/adapter_model\.bin is a torch pickle, which this lab does not read: save the adapter with PEFT's save_pretrained\(dir, safe_serialization=True\)/);
    expect(errorOf(() => importPeftAdapter(cfg, { 'adapter_config.json': f['adapter_config.json'] }))).toContain('has adapter_config.json but no adapter_model.safetensors');
    expect(errorOf(() => importPeftAdapter(cfg, { 'adapter_model.safetensors': bytes }))).toMatch(/^not a PEFT adapter: no adapter_config\.json/);
    expect(errorOf(() => importPeftAdapter(cfg, { ...f, 'adapter_config.json': '{"r": 4,' }))).toMatch(/^adapter_config\.json is not valid JSON/);
    expect(errorOf(() => importPeftAdapter(cfg, { ...f, 'adapter_config.json': '[1]' }))).toBe('adapter_config.json is not a JSON object');
  });
});
