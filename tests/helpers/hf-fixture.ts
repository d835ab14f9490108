/**
 * A small Hugging Face Llama checkpoint made in TS for tests: the config as transformers writes it
 * for a GQA model saved in bf16, random bf16 weights, sharded in two files with
 * model.safetensors.index.json (as save_pretrained(max_shard_size=...) does), and a byte-level BPE
 * tokenizer.json with its tokenizer_config.json.
 */
import { writeSafetensors, type SafeTensorIn } from '../../src/engine/io/safetensors';
import { modelConfigFromHf } from '../../src/engine/io/checkpoint';
import { paramSpecs, type ModelConfig } from '../../src/engine/model/config';
import { trainByteBpe } from '../../src/engine/train/tokenizer/bpe-train';
import { Rng } from '../../src/engine/util/rng';

/** A config as transformers writes it for a small GQA Llama saved in bf16 (extra keys it always has). */
export const hfConfig = {
  architectures: ['LlamaForCausalLM'], model_type: 'llama', vocab_size: 300, hidden_size: 32, intermediate_size: 48,
  num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 64, rms_norm_eps: 1e-5,
  rope_theta: 10000, tie_word_embeddings: false, initializer_range: 0.02, hidden_act: 'silu', attention_bias: false,
  attention_dropout: 0.0, mlp_bias: false, head_dim: 8, pretraining_tp: 1, rope_scaling: null, torch_dtype: 'bfloat16',
  bos_token_id: 1, eos_token_id: 2, use_cache: true, transformers_version: '4.57.1',
};
export const config = modelConfigFromHf(hfConfig);

/** Random bf16 bits for every parameter (any bits but NaN/Inf patterns are fine weights). */
export function bf16Params(c: ModelConfig, seed: number): Map<string, Uint16Array> {
  const rng = new Rng(seed);
  return new Map(paramSpecs(c).map((s) => {
    const n = s.shape.reduce((a, b) => a * b, 1);
    return [s.name, Uint16Array.from({ length: n }, () => (rng.nextU32() & 0x807f) | 0x3c00)];
  }));
}

/** model.safetensors split in two shards with model.safetensors.index.json, as save_pretrained(max_shard_size=...) does. */
export function sharded(bits: Map<string, Uint16Array>): Record<string, Uint8Array | string> {
  const names = [...bits.keys()];
  const half = Math.ceil(names.length / 2);
  const shard = (i: number) => `model-0000${i + 1}-of-00002.safetensors`;
  const files: Record<string, Uint8Array | string> = {};
  const weightMap: Record<string, string> = {};
  [names.slice(0, half), names.slice(half)].forEach((part, i) => {
    const t: SafeTensorIn[] = part.map((name) => ({ name, dtype: 'BF16', shape: paramSpecs(config).find((s) => s.name === name)!.shape, data: bits.get(name)! }));
    files[shard(i)] = writeSafetensors(t, { format: 'pt' });
    for (const n of part) weightMap[n] = shard(i);
  });
  files['model.safetensors.index.json'] = JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap });
  return files;
}

/** Every file of the fixture directory. */
export function hfFixtureFiles(text: string): Record<string, Uint8Array | string> {
  const tok = trainByteBpe(text, { vocabSize: hfConfig.vocab_size });
  return {
    ...sharded(bf16Params(config, 7)), 'config.json': JSON.stringify(hfConfig), 'tokenizer.json': JSON.stringify(tok.hfJSON()),
    'tokenizer_config.json': JSON.stringify({ eos_token: '<|endoftext|>' }),
  };
}
