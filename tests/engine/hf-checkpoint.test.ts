import { readFileSync } from 'node:fs';
import { Tokenizer as HfLib } from '@huggingface/tokenizers';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint, modelConfigFromHf, type CheckpointFilesIn } from '../../src/engine/io/checkpoint';
import { writeSafetensors, type SafeTensorIn } from '../../src/engine/io/safetensors';
import { bf16Params, config, hfConfig, sharded } from '../helpers/hf-fixture';
import { paramSpecs, type ModelConfig } from '../../src/engine/model/config';
import { trainByteBpe } from '../../src/engine/train/tokenizer/bpe-train';
import { tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { hfTokenizerFiles, runCheckpoint } from '../../src/engine/train/trainer';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { Rng } from '../../src/engine/util/rng';

const corpus = readFileSync(new URL('../../public/data/tinyshakespeare.txt', import.meta.url), 'utf8');
const enc = (s: string) => new TextEncoder().encode(s);

describe('Hugging Face checkpoints in', () => {
  const bits = bf16Params(config, 7);
  const tok = trainByteBpe(corpus.slice(0, 40_000), { vocabSize: 300 });

  it('sharded bf16 with an index: every weight widened exactly, tokenizer.json and its config read', () => {
    const files: CheckpointFilesIn = {
      ...sharded(bits), 'config.json': JSON.stringify(hfConfig), 'tokenizer.json': enc(JSON.stringify(tok.hfJSON())),
      'tokenizer_config.json': JSON.stringify({ eos_token: '<|endoftext|>' }),
    };
    const ck = loadCheckpoint(files);
    expect(ck.config).toEqual(config);
    for (const [name, b] of bits) {
      const got = new Uint32Array(ck.params.get(name)!.buffer, ck.params.get(name)!.byteOffset, b.length);
      for (let i = 0; i < b.length; i++) if (got[i] !== (b[i] << 16) >>> 0) throw new Error(`${name}[${i}]: ${got[i]} != ${(b[i] << 16) >>> 0}`);
    }
    const t = tokenizerFromJSON(ck.extra!.tokenizer, ck.extra!.tokenizerConfig);
    expect(t.vocabSize).toBe(300);
    expect(t.eosId).toBe(299);
    expect(Array.from(t.encode('Hello there'))).toEqual(Array.from(tok.encode('Hello there')));
  });

  it('fp16 single file: exact, subnormals included; old rotary buffers are ignored', () => {
    const specs = paramSpecs(config);
    const t: SafeTensorIn[] = specs.map((s) => ({ name: s.name, dtype: 'F16', shape: s.shape, data: new Uint16Array(s.shape.reduce((a, b) => a * b, 1)).fill(0x3555) }));
    t[0].data = new Uint16Array((t[0].data as Uint16Array).length).fill(0x0001); // smallest subnormal, 2^-24
    t.push({ name: 'model.layers.0.self_attn.rotary_emb.inv_freq', dtype: 'F32', shape: [4], data: new Float32Array(4) });
    const ck = loadCheckpoint({ 'config.json': JSON.stringify(hfConfig), 'model.safetensors': writeSafetensors(t) });
    expect(ck.params.get(specs[0].name)![0]).toBe(2 ** -24);
    expect(ck.params.get('model.norm.weight')![0]).toBe(0.333251953125); // 0x3555
  });

  it('shards that do not match the index are listed, a missing shard named', () => {
    const files = sharded(bits);
    const base = { 'config.json': JSON.stringify(hfConfig) };
    const { 'model-00002-of-00002.safetensors': _gone, ...noShard } = files;
    void _gone;
    expect(() => loadCheckpoint({ ...base, ...noShard })).toThrow(/shard model-00002-of-00002\.safetensors is missing/);
    const idx = JSON.parse(files['model.safetensors.index.json'] as string);
    idx.weight_map['model.norm.weight'] = 'model-00001-of-00002.safetensors';
    idx.weight_map['ghost.weight'] = 'model-00001-of-00002.safetensors';
    let msg = '';
    try {
      loadCheckpoint({ ...base, ...files, 'model.safetensors.index.json': JSON.stringify(idx) });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/model-00002-of-00002\.safetensors holds model\.norm\.weight, which weight_map puts in model-00001-of-00002\.safetensors/);
    expect(msg).toMatch(/weight_map puts ghost\.weight in model-00001-of-00002\.safetensors, which does not hold it/);
    expect(() => loadCheckpoint(base)).toThrow(/no model\.safetensors \(as bytes\) and no model\.safetensors\.index\.json/);
    expect(() => loadCheckpoint({ ...base, 'model.safetensors.index.json': '{}' })).toThrow(/no weight_map/);
  });

  it('config keys the engine does not run are refused, each named', () => {
    const refuse = (patch: Record<string, unknown>, re: RegExp) => expect(() => modelConfigFromHf({ ...hfConfig, ...patch })).toThrow(re);
    refuse({ rope_scaling: { rope_type: 'llama3', factor: 8 } }, /rope_scaling .*llama3/);
    refuse({ rope_parameters: { rope_type: 'yarn', rope_theta: 10000 } }, /rope_parameters\.rope_type "yarn"/);
    refuse({ attention_bias: true }, /attention_bias true/);
    refuse({ mlp_bias: true }, /mlp_bias true/);
    refuse({ hidden_act: 'gelu' }, /hidden_act "gelu"/);
    refuse({ head_dim: 16 }, /head_dim 16 != hidden_size \/ num_attention_heads = 8/);
    refuse({ model_type: 'mistral' }, /model_type "mistral"/);
    let msg = '';
    try {
      modelConfigFromHf({ ...hfConfig, mlp_bias: true, hidden_act: 'relu' });
    } catch (e) {
      msg = (e as Error).message;
    }
    expect(msg).toMatch(/hidden_act "relu"[\s\S]*mlp_bias true/);
  });
});

describe('Hugging Face checkpoints out', () => {
  const cfg: ModelConfig = { ...config, vocab_size: 300, tie_word_embeddings: true };
  const opts = defaultTrainOptions('micro', { model: cfg, seq: 16 });
  const state = () => {
    const rng = new Rng(3);
    const p = new Map(paramSpecs(opts.model).map((s) => [s.name, rng.normalArray(s.shape.reduce((a, b) => a * b, 1), 0.02)]));
    return { params: p, m: p, v: p };
  };

  it('a BPE run exports tokenizer.json (same ids in the library), tokenizer_config.json and generation_config.json', () => {
    const tok = trainByteBpe(corpus.slice(0, 40_000), { vocabSize: 300 });
    const files = runCheckpoint(opts, tok, 5, state());
    const lib = new HfLib(JSON.parse(files['tokenizer.json']!), JSON.parse(files['tokenizer_config.json']!));
    const text = corpus.slice(50_000, 52_000);
    expect(lib.encode(text, { add_special_tokens: false }).ids).toEqual(Array.from(tok.encode(text)));
    expect(JSON.parse(files['tokenizer_config.json']!)).toMatchObject({ tokenizer_class: 'PreTrainedTokenizerFast', eos_token: '<|endoftext|>', model_max_length: opts.model.max_position_embeddings });
    expect(JSON.parse(files['generation_config.json']!)).toMatchObject({ eos_token_id: 299, pad_token_id: 299 });
    expect(JSON.parse(files['config.json']).eos_token_id).toBe(299);
    // The whole bundle loads back: weights, and the tokenizer from lab.json.
    const back = loadCheckpoint(files as unknown as CheckpointFilesIn);
    expect(tokenizerFromJSON(back.extra!.tokenizer).encode(text)).toEqual(tok.encode(text));
  });

  it('a char run exports a tokenizer.json too (no end-of-text token); old lab.json tokenizers load', () => {
    const tok = CharTokenizer.fromText(corpus);
    const o = defaultTrainOptions('micro', { model: { vocab_size: 65 } });
    const rng = new Rng(1);
    const p = new Map(paramSpecs(o.model).map((s) => [s.name, rng.normalArray(s.shape.reduce((a, b) => a * b, 1), 0.02)]));
    const files = runCheckpoint(o, tok, 1, { params: p, m: p, v: p });
    expect(hfTokenizerFiles(tok).eos).toBeNull();
    expect(JSON.parse(files['generation_config.json']!).eos_token_id).toBeNull();
    const lib = new HfLib(JSON.parse(files['tokenizer.json']!), {});
    expect(lib.encode('First Citizen', { add_special_tokens: false }).ids).toEqual(Array.from(tok.encode('First Citizen')));
    expect(JSON.parse(files['lab.json']!).tokenizer).toEqual({ type: 'char', vocab: tok.vocab });
    expect(tokenizerFromJSON(loadCheckpoint(files as unknown as CheckpointFilesIn).extra!.tokenizer)).toBeInstanceOf(CharTokenizer);
  });
});
