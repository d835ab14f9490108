/**
 * The page's "from the Hub" import (state/hub-import.ts) against a local server in the Hub's layout
 * (tests/fixtures/hf-llama as a repo), a Map-backed Cache API and the real data panel controller with
 * the data worker's jobs in-process: the model becomes the draft's starting point named by its id,
 * a second import reads the cache without a request, the size check refuses before any weight is
 * fetched, and cancel stops a download.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DataController, type DataJobs } from '../../src/state/data-prep';
import { CacheHubStore, HubImportController, type HubCache } from '../../src/state/hub-import';
import { createLabStore } from '../../src/state/lab';
import { importModel } from '../../src/worker/checkpoint-files';
import type { ToDataWorker } from '../../src/worker/data-protocol';
import { prepareData, type PreparedMeta, type TokenCache } from '../../src/worker/prepare';
import { parseHubRef } from '../../src/engine/io/hub/hub';
import { fixtureRepo, startHubServer, type HubServer } from '../helpers/hub-server';
import { readFileSync } from 'node:fs';

class MapCache implements HubCache {
  entries = new Map<string, { body: ArrayBuffer; headers: [string, string][] }>();
  async match(key: string) {
    const e = this.entries.get(key);
    return e ? new Response(e.body.slice(0), { headers: e.headers }) : undefined;
  }
  async put(key: string, r: Response) {
    this.entries.set(key, { body: await r.arrayBuffer(), headers: [...r.headers] });
  }
  async delete(key: string) {
    return this.entries.delete(key);
  }
}

class MemoryTokenCache implements TokenCache {
  metas = new Map<string, PreparedMeta>();
  async meta(key: string) { return this.metas.get(key) ?? null; }
  async create(key: string) {
    const sink = { write: () => {} };
    return { sinks: { train: sink, val: sink }, commit: async (m: PreparedMeta) => void this.metas.set(key, m), discard: async () => {} };
  }
}

/** The data worker's jobs, in-process (as tests/state/data-prep.test.ts runs them). */
function inProcessJobs(): DataJobs {
  const cache = new MemoryTokenCache();
  return {
    async run(job: ToDataWorker) {
      if (job.type === 'import') return { type: 'imported', id: 0, model: await importModel(job.files) };
      if (job.type === 'prepare') return { type: 'prepared', id: 0, data: await prepareData(job.files, { field: job.field, tokenizer: job.tokenizer }, cache) };
      throw new Error(`unexpected job ${job.type}`);
    },
    cancel: () => {},
  } as unknown as DataJobs;
}

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 6000);
let hub: HubServer;
const llama = fixtureRepo('hf-llama/model', 'hf-llama/tokenizer');

function setup(o: { storage?: number; limits?: { maxBufferSize: number; maxStorageBufferBindingSize: number } } = {}) {
  const lab = createLabStore();
  if (o.limits) lab.setState({ gpu: { state: 'available', adapter: 'test', limits: o.limits } });
  const data = new DataController(lab, inProcessJobs(), async () => new File([text], 'tinyshakespeare.txt'));
  const cache = new MapCache();
  const hubImport = new HubImportController(lab, data, { openCache: async () => cache, storageAvailable: async () => o.storage ?? 2 ** 30 });
  return { lab, data, cache, hubImport };
}

beforeAll(async () => {
  hub = await startHubServer();
});
afterAll(() => hub.close());
beforeEach(() => {
  hub.reset();
  hub.repos.set('lab/hf-llama', llama);
});

describe('page: import from the Hub', () => {
  it('fetches into the cache and imports through the data panel: the draft starts from the model, named by its id; the second import makes no request', async () => {
    const { lab, data, cache, hubImport } = setup();
    const phases: string[] = [];
    hubImport.state.subscribe((s) => s.job && phases.push(s.job.phase));
    await hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    expect(hubImport.state.getState()).toMatchObject({ error: null, job: null, imported: 'lab/hf-llama' });
    expect(phases).toContain('downloading');
    expect(data.state.getState().imported?.name).toBe('lab/hf-llama');
    const draft = lab.getState().draft;
    expect(draft.init?.name).toBe('lab/hf-llama');
    expect(draft.model).toMatchObject({ hidden_size: 64, num_key_value_heads: 2, vocab_size: 320 });
    expect(draft.tokenizer).toMatchObject({ vocabSize: 320 });
    const store = new CacheHubStore(cache, parseHubRef('lab/hf-llama'));
    expect(new Uint8Array(await (await cache.match(store.key('model-00001-of-00003.safetensors')))!.arrayBuffer())).toEqual(llama.get('model-00001-of-00003.safetensors'));

    const requests = hub.log.length;
    const again = setup();
    again.cache.entries = cache.entries;
    await again.hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    expect(again.hubImport.state.getState()).toMatchObject({ error: null, imported: 'lab/hf-llama' });
    expect(hub.log.length).toBe(requests);
  });

  it('the size check refuses before any weight is fetched: storage, and the engine\'s plan against the adapter\'s limits', async () => {
    const small = setup({ storage: 10_000 });
    await small.hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    expect(small.hubImport.state.getState().error).toMatch(/lab\/hf-llama is .* KiB to download, but only 9.8 KiB of storage is free/);
    const tight = setup({ limits: { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 64 * 1024 } });
    await tight.hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    expect(tight.hubImport.state.getState().error).toMatch(/weights take .* as fp32, more than this GPU's maxStorageBufferBindingSize \(64.0 KiB\)/);
    // The weights (0.5 MiB) fit 1 MiB, but the next run's logits at batch 64 × context 64 (5 MiB) do not.
    const planned = setup({ limits: { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 20 } });
    planned.lab.getState().setDraft({ batch: 64, seq: 64 });
    await planned.hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    expect(planned.hubImport.state.getState().error).toMatch(/cannot train here with the current settings: logits \(5.0 MiB\) is larger than this GPU's maxStorageBufferBindingSize/);
    expect(hub.log.filter((l) => l.startsWith('GET') && l.endsWith('.safetensors'))).toEqual([]);
    expect(small.data.state.getState().imported).toBeNull();
  });

  it('errors read as the client words them (a token hint for the page), and cancel stops a download', async () => {
    const { hubImport } = setup();
    await hubImport.start('lab/private', { endpoint: hub.endpoint });
    expect(hubImport.state.getState().error).toMatch(/lab\/private was not found, or is private \(HTTP 401 for config.json\); pass a token that can read it: paste a Hugging Face access token in the token field/);
    await hubImport.start('not an id', { endpoint: hub.endpoint });
    expect(hubImport.state.getState().error).toMatch(/is not a Hugging Face model id/);

    const slow = setup();
    // A body that never finishes: cut at 1 byte is a close; hold instead by cancelling at the first progress.
    const off = slow.hubImport.state.subscribe((s) => s.job?.phase === 'downloading' && slow.hubImport.cancel());
    await slow.hubImport.start('lab/hf-llama', { endpoint: hub.endpoint });
    off();
    expect(slow.hubImport.state.getState()).toMatchObject({ job: null, imported: null });
    expect(slow.hubImport.state.getState().error).toMatch(/download of lab\/hf-llama cancelled/);
    expect(slow.data.state.getState().imported).toBeNull();
  });
});
