import { describe, expect, it } from 'vitest';
import { loadCheckpoint, modelConfigFromHf, saveCheckpoint, type CheckpointFilesIn } from '../../src/engine/io/checkpoint';
import { readSafetensors, writeSafetensors } from '../../src/engine/io/safetensors';
import { hfConfigJson, paramSpecs, PRESETS, type ModelConfig } from '../../src/engine/model/config';
import { Rng } from '../../src/engine/util/rng';

const micro = PRESETS.micro; // tied embeddings, GQA
const untied: ModelConfig = { ...micro, tie_word_embeddings: false, num_hidden_layers: 1, vocab_size: 7 };

function randomParams(c: ModelConfig, seed: number): Map<string, Float32Array> {
  const rng = new Rng(seed);
  return new Map(paramSpecs(c).map((s) => [s.name, rng.normalArray(s.shape.reduce((a, b) => a * b, 1), 0.02)]));
}

describe('checkpoint', () => {
  it('model.safetensors holds exactly the HF state dict, F32, format pt; lm_head omitted when tied', () => {
    for (const c of [micro, untied]) {
      const files = saveCheckpoint({ config: c, params: randomParams(c, 1) });
      const st = readSafetensors(files['model.safetensors']);
      expect(st.metadata).toEqual({ format: 'pt' });
      expect([...st.tensors.keys()].sort()).toEqual(paramSpecs(c).map((s) => s.name).sort());
      expect(st.tensors.has('lm_head.weight')).toBe(!c.tie_word_embeddings);
      for (const s of paramSpecs(c)) {
        expect(st.tensors.get(s.name)!.dtype).toBe('F32');
        expect(st.tensors.get(s.name)!.shape).toEqual(s.shape);
      }
      expect(JSON.parse(files['config.json'])).toEqual(hfConfigJson(c));
      expect(files['optimizer.safetensors']).toBeUndefined();
      expect(files['lab.json']).toBeUndefined();
    }
  });

  it('round trip with optimizer state, tokenizer and training state (files as bytes too)', () => {
    const params = randomParams(untied, 2);
    const optimizer = { m: randomParams(untied, 3), v: randomParams(untied, 4), step: 17 };
    const tokenizer = { type: 'char', vocab: ['a', 'b'] };
    const train = { step: 17, seed: 5 };
    const files = saveCheckpoint({ config: untied, params, extra: { optimizer, tokenizer, train } });
    const asBytes: CheckpointFilesIn = { ...files, 'config.json': new TextEncoder().encode(files['config.json']) };
    for (const f of [files as unknown as CheckpointFilesIn, asBytes]) {
      const ck = loadCheckpoint(f);
      expect(ck.config).toEqual(untied);
      for (const [n, a] of params) expect(Array.from(ck.params.get(n)!)).toEqual(Array.from(a));
      expect(ck.extra?.optimizer?.step).toBe(17);
      for (const [n, a] of optimizer.v) expect(Array.from(ck.extra!.optimizer!.v.get(n)!)).toEqual(Array.from(a));
      for (const [n, a] of optimizer.m) expect(Array.from(ck.extra!.optimizer!.m.get(n)!)).toEqual(Array.from(a));
      expect(ck.extra?.tokenizer).toEqual(tokenizer);
      expect(ck.extra?.train).toEqual(train);
    }
  });

  it('save lists missing, unexpected and mis-sized params', () => {
    const p = randomParams(micro, 1);
    p.delete('model.norm.weight');
    p.set('lm_head.weight', new Float32Array(65 * 32));
    p.set('model.layers.0.mlp.up_proj.weight', new Float32Array(3));
    expect(() => saveCheckpoint({ config: micro, params: p })).toThrow(
      /missing 1: model\.norm\.weight \[32\][\s\S]*unexpected 1: lm_head\.weight[\s\S]*model\.layers\.0\.mlp\.up_proj\.weight: 3 elements, want \[64, 32\] = 2048/,
    );
  });

  it('load lists missing, unexpected, mis-shaped and wrong-dtype tensors against config.json', () => {
    const good = saveCheckpoint({ config: untied, params: randomParams(untied, 1) });
    const st = readSafetensors(good['model.safetensors']);
    const t = [...st.tensors].map(([name, v]) => ({ name, dtype: v.dtype, shape: v.shape, data: v.data }));
    const edited = t
      .filter((x) => x.name !== 'model.norm.weight')
      .map((x) => (x.name === 'lm_head.weight' ? { ...x, shape: [32, 7] } : x))
      .map((x) => (x.name === 'model.layers.0.input_layernorm.weight' ? { ...x, dtype: 'I32' as const } : x));
    edited.push({ name: 'extra.bias', dtype: 'F32', shape: [1], data: new Float32Array(1) });
    const files = { ...good, 'model.safetensors': writeSafetensors(edited) };
    let msg = '';
    try {
      loadCheckpoint(files);
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/checkpoint does not match its config \(1 layers, hidden 32, vocab 7\)/);
    expect(msg).toMatch(/missing 1: model\.norm\.weight \[32\]/);
    expect(msg).toMatch(/unexpected 1: extra\.bias \[1\]/);
    expect(msg).toMatch(/wrong shape 1: lm_head\.weight: \[32, 7\], want \[7, 32\]/);
    expect(msg).toMatch(/model\.layers\.0\.input_layernorm\.weight has dtype I32, want F32/);
  });

  it('tied config with an lm_head tensor, corrupt file, bad config are reported', () => {
    const untiedFiles = saveCheckpoint({ config: untied, params: randomParams(untied, 1) });
    const tiedCfg = JSON.stringify(hfConfigJson({ ...untied, tie_word_embeddings: true }));
    expect(() => loadCheckpoint({ ...untiedFiles, 'config.json': tiedCfg })).toThrow(/unexpected 1: lm_head\.weight/);
    expect(() => loadCheckpoint({ ...untiedFiles, 'model.safetensors': untiedFiles['model.safetensors'].subarray(0, 100) })).toThrow(
      /^model\.safetensors: safetensors: .*truncated/,
    );
    expect(() => loadCheckpoint({ ...untiedFiles, 'config.json': '{' })).toThrow(/config\.json is not valid JSON/);
    expect(() => loadCheckpoint({ 'config.json': untiedFiles['config.json'] })).toThrow(/no model\.safetensors/);
    const cfg = JSON.parse(untiedFiles['config.json']);
    expect(() => loadCheckpoint({ ...untiedFiles, 'config.json': JSON.stringify({ ...cfg, hidden_size: 30 }) })).toThrow(/invalid model config/);
    expect(() => loadCheckpoint({ ...untiedFiles, 'config.json': JSON.stringify({ ...cfg, attention_bias: true }) })).toThrow(/attention_bias true/);
    const badOpt = saveCheckpoint({ config: untied, params: randomParams(untied, 1), extra: { optimizer: { m: randomParams(untied, 2), v: randomParams(untied, 3), step: 1 } } });
    const ost = readSafetensors(badOpt['optimizer.safetensors']!);
    const dropped = [...ost.tensors].filter(([n]) => n !== 'exp_avg_sq.model.norm.weight').map(([name, v]) => ({ name, ...v }));
    expect(() => loadCheckpoint({ ...badOpt, 'optimizer.safetensors': writeSafetensors(dropped, ost.metadata) })).toThrow(
      /optimizer\.safetensors \(exp_avg_sq\): missing 1: model\.norm\.weight/,
    );
  });

  it('reads HF configs written elsewhere: defaults filled, extra keys ignored, bf16 weights widened', () => {
    const raw = { model_type: 'llama', vocab_size: 7, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, rope_parameters: { rope_theta: 500000, rope_type: 'default' }, transformers_version: '5.0' };
    const c = modelConfigFromHf(raw);
    expect(c).toMatchObject({ num_key_value_heads: 4, rms_norm_eps: 1e-6, rope_theta: 500000, tie_word_embeddings: false, max_position_embeddings: 2048 });
    const specs = paramSpecs(c);
    const bf = writeSafetensors(specs.map((s) => ({ name: s.name, dtype: 'BF16' as const, shape: s.shape, data: new Uint16Array(s.shape.reduce((a, b) => a * b, 1)).fill(0x3fc0) })));
    const ck = loadCheckpoint({ 'config.json': JSON.stringify(raw), 'model.safetensors': bf });
    expect(ck.params.get('model.norm.weight')![0]).toBe(1.5);
  });
});
