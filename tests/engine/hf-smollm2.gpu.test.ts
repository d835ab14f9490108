/**
 * The SmolLM2-shaped fixture transformers made (tools/make-hf-fixture.py smollm2, committed under
 * tests/fixtures/hf-smollm2/, one folder in the Hub's layout): fetched from a local server in that
 * layout with the Hub client, it imports with SmolLM2's architecture (tied embeddings, 9/3 heads,
 * rope_theta 100000), our tokenizer gives transformers' ids, and the model gives its logits and loss.
 * Skipped until the fixture is committed (it is made on a machine with torch).
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { fetchHubModel, parseHubRef, type HubManifest, type HubStore } from '../../src/engine/io/hub/hub';
import { tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { testRuntime } from '../helpers/gpu';
import { fixtureRepo, FIXTURE_ROOT, startHubServer, type HubServer } from '../helpers/hub-server';
import { logitsOf } from '../helpers/model';

const FIX = path.join(FIXTURE_ROOT, 'hf-smollm2');
let hub: HubServer;

/** The fetched files, kept whole in memory. */
function memoryStore(files: Map<string, Uint8Array>): HubStore {
  let manifest: HubManifest | null = null;
  return {
    complete: async () => manifest,
    partial: async () => 0,
    writer: async (f) => {
      const chunks: Uint8Array[] = [];
      return {
        write: async (c) => void chunks.push(c.slice()),
        commit: async () => void files.set(f, new Uint8Array(Buffer.concat(chunks))),
        abandon: async () => {},
      };
    },
    finish: async (m) => void (manifest = m),
  };
}

describe.skipIf(!existsSync(path.join(FIX, 'config.json')))('the SmolLM2-shaped fixture from a Hub-layout server', () => {
  beforeAll(async () => {
    hub = await startHubServer();
    hub.repos.set('HuggingFaceTB/SmolLM2-mini', fixtureRepo('hf-smollm2'));
  });
  afterAll(() => hub?.close());

  it('imports with SmolLM2\'s architecture; the tokenizer gives transformers\' ids and the model its logits and loss', async () => {
    const files = new Map<string, Uint8Array>();
    const got = await fetchHubModel(parseHubRef('HuggingFaceTB/SmolLM2-mini'), { endpoint: hub.endpoint, store: memoryStore(files) });
    expect(got.manifest.files.map((f) => f.name)).toContain('model.safetensors');
    const ck = loadCheckpoint(Object.fromEntries(files));
    expect(ck.config).toMatchObject({ num_attention_heads: 9, num_key_value_heads: 3, hidden_size: 72, num_hidden_layers: 4, tie_word_embeddings: true, rope_theta: 100000 });
    expect(ck.params.has('lm_head.weight')).toBe(false);

    const tok = tokenizerFromJSON(ck.extra!.tokenizer!, ck.extra!.tokenizerConfig);
    const { samples } = JSON.parse(readFileSync(path.join(FIX, 'ids.json'), 'utf8')) as { samples: { text: string; ids: number[]; decoded: string }[] };
    for (const s of samples) {
      expect(Array.from(tok.encode(s.text)), s.text).toEqual(s.ids);
      expect(tok.decode(s.ids)).toBe(s.decoded);
    }

    const ref = JSON.parse(readFileSync(path.join(FIX, 'logits.json'), 'utf8')) as { inputs: number[][]; logits: number[][][]; loss: number[] };
    const rt = await testRuntime();
    const V = ck.config.vocab_size;
    for (let i = 0; i < ref.inputs.length; i++) {
      const ids = ref.inputs[i];
      const T = ids.length;
      const got = await logitsOf(rt, ck.config, ck.params, ids);
      let maxErr = 0;
      let maxRef = 0;
      let loss = 0;
      for (let t = 0; t < T; t++) {
        let max = -Infinity;
        for (let v = 0; v < V; v++) {
          maxErr = Math.max(maxErr, Math.abs(got[t * V + v] - ref.logits[i][t][v]));
          maxRef = Math.max(maxRef, Math.abs(ref.logits[i][t][v]));
          max = Math.max(max, got[t * V + v]);
        }
        if (t < T - 1) {
          let sum = 0;
          for (let v = 0; v < V; v++) sum += Math.exp(got[t * V + v] - max);
          loss += max + Math.log(sum) - got[t * V + ids[t + 1]];
        }
      }
      // fp32 on both sides, other summation orders: relative to the logits' scale.
      expect(maxErr / maxRef, `sequence ${i}`).toBeLessThan(1e-4);
      // transformers' loss: mean next-token cross-entropy over the T-1 predicted positions.
      expect(Math.abs(loss / (T - 1) - ref.loss[i]) / ref.loss[i], `sequence ${i} loss`).toBeLessThan(1e-4);
    }
  });
});
