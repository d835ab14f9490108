/**
 * The fixtures transformers made (tools/make-hf-fixture.py, committed under tests/fixtures/hf-llama/):
 * our tokenizer gives the ids PreTrainedTokenizerFast gave, and the imported bf16, sharded GQA model
 * gives the logits LlamaForCausalLM gave (same weights in fp32).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { testRuntime } from '../helpers/gpu';
import { logitsOf } from '../helpers/model';

const FIX = path.resolve(__dirname, '../fixtures/hf-llama');
const readDir = (d: string) => Object.fromEntries(readdirSync(d).filter((n) => /\.(json|safetensors)$/.test(n) && n !== 'logits.json')
  .map((n) => [n, new Uint8Array(readFileSync(path.join(d, n)))]));

describe('Hugging Face fixtures made by transformers', () => {
  it('our tokenizer gives the ids and the decoded text of PreTrainedTokenizerFast', () => {
    const dir = path.join(FIX, 'tokenizer');
    const tok = tokenizerFromJSON(JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
      JSON.parse(readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')));
    const { samples } = JSON.parse(readFileSync(path.join(dir, 'ids.json'), 'utf8')) as { samples: { text: string; ids: number[]; decoded: string }[] };
    expect(samples.length).toBe(4);
    for (const s of samples) {
      expect(Array.from(tok.encode(s.text)), s.text).toEqual(s.ids);
      expect(tok.decode(s.ids)).toBe(s.decoded);
    }
  });

  it('the imported bf16 sharded GQA model gives transformers\' logits', async () => {
    const ck = loadCheckpoint(readDir(path.join(FIX, 'model')));
    expect(ck.config).toMatchObject({ num_attention_heads: 4, num_key_value_heads: 2, hidden_size: 64, vocab_size: 320 });
    const ref = JSON.parse(readFileSync(path.join(FIX, 'model', 'logits.json'), 'utf8')) as { inputs: number[][]; logits: number[][][] };
    const rt = await testRuntime();
    for (let i = 0; i < ref.inputs.length; i++) {
      const ids = ref.inputs[i];
      const T = ids.length;
      const V = ck.config.vocab_size;
      const got = await logitsOf(rt, ck.config, ck.params, ids);
      let maxErr = 0;
      let maxRef = 0;
      for (let t = 0; t < T; t++) {
        for (let v = 0; v < V; v++) {
          maxErr = Math.max(maxErr, Math.abs(got[t * V + v] - ref.logits[i][t][v]));
          maxRef = Math.max(maxRef, Math.abs(ref.logits[i][t][v]));
        }
      }
      // Relative to the logits' scale: fp32 throughout on both sides, other summation orders.
      expect(maxErr / maxRef, `sequence ${i}`).toBeLessThan(1e-4);
    }
  });
});
