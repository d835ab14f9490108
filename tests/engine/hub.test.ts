/**
 * The Hub client (engine/io/hub) against a local server in the Hub's layout serving the transformers-made
 * fixture tests/fixtures/hf-llama (model/ and tokenizer/ merged, as a Hub repo holds them): sharded and
 * single-file weights, the store as the cache (a second fetch makes no request), and every refusal
 * with the words a user acts on: 401/403 (gated, token), 404 (which file), not Llama, truncated,
 * corrupt header, too big for the device or the storage (refused before any weight is requested).
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loadCheckpoint, saveCheckpoint } from '../../src/engine/io/checkpoint';
import {
  fetchHubModel, hubFitProblem, HubError, parseHubRef, type HubFetchOptions, type HubManifest, type HubPlan, type HubStore,
} from '../../src/engine/io/hub/hub';
import { fixtureRepo, startHubServer, type HubServer } from '../helpers/hub-server';

/** An in-memory store: files committed whole, partial bytes kept for resuming. */
class MemoryStore implements HubStore {
  files = new Map<string, Uint8Array>();
  parts = new Map<string, Uint8Array>();
  manifest: HubManifest | null = null;
  async complete() {
    return this.manifest;
  }
  async partial(f: string) {
    return this.parts.get(f)?.length ?? 0;
  }
  async writer(f: string, offset: number) {
    let buf = offset > 0 ? this.parts.get(f)!.slice(0, offset) : new Uint8Array(0);
    return {
      write: async (c: Uint8Array) => {
        const n = new Uint8Array(buf.length + c.length);
        n.set(buf);
        n.set(c, buf.length);
        buf = n;
      },
      commit: async () => {
        this.files.set(f, buf);
        this.parts.delete(f);
      },
      abandon: async (keep: boolean) => {
        if (keep) this.parts.set(f, buf);
        else this.parts.delete(f);
      },
    };
  }
  async finish(m: HubManifest) {
    this.manifest = m;
  }
}

let hub: HubServer;
const llama = fixtureRepo('hf-llama/model', 'hf-llama/tokenizer');
const fetchOf = (id: string, o: Partial<HubFetchOptions> = {}) => {
  const store = (o.store as MemoryStore | undefined) ?? new MemoryStore();
  return { store, run: () => fetchHubModel(parseHubRef(id), { endpoint: hub.endpoint, ...o, store }) };
};
const refusal = async (p: Promise<unknown>): Promise<HubError> => {
  const e = await p.then(() => null, (x: unknown) => x);
  expect(e).toBeInstanceOf(HubError);
  return e as HubError;
};

beforeAll(async () => {
  hub = await startHubServer();
});
afterAll(() => hub.close());
beforeEach(() => {
  hub.reset();
  hub.repos.set('lab/hf-llama', llama);
});

describe('Hub client: fetch', () => {
  it('a sharded model (index + 3 shards) arrives whole, with progress, and imports as the directory does; a second fetch is a cache hit with no request', async () => {
    const seen: { file: string; done: number; total: number }[] = [];
    const { store, run } = fetchOf('lab/hf-llama', { onProgress: (p) => seen.push({ file: p.file, done: p.done, total: p.total }) });
    const got = await run();
    expect(got.cached).toBe(false);
    expect(got.manifest.files.map((f) => f.name).sort()).toEqual([...llama.keys()].sort());
    for (const [n, b] of llama) expect(Buffer.from(store.files.get(n)!).equals(Buffer.from(b)), n).toBe(true);
    const total = [...llama.values()].reduce((s, b) => s + b.length, 0);
    expect(seen.at(-1)).toMatchObject({ done: total, total });
    expect(seen.every((p, i) => i === 0 || p.done >= seen[i - 1].done)).toBe(true);
    // The same checkpoint as the fixture folders read directly.
    const viaHub = loadCheckpoint(Object.fromEntries(store.files));
    const direct = loadCheckpoint(Object.fromEntries(llama));
    expect(viaHub.config).toEqual(direct.config);
    // Bytes compared as buffers: toEqual on every element of the Float32Arrays takes seconds.
    for (const [n, p] of direct.params) expect(Buffer.from(viaHub.params.get(n)!.buffer, viaHub.params.get(n)!.byteOffset, p.byteLength).equals(Buffer.from(p.buffer, p.byteOffset, p.byteLength)), n).toBe(true);
    expect(viaHub.extra?.tokenizer).toEqual(direct.extra?.tokenizer);

    const requests = hub.log.length;
    const again = await fetchOf('lab/hf-llama', { store }).run();
    expect(again.cached).toBe(true);
    expect(hub.log.length).toBe(requests);
  });

  it('a single model.safetensors (no index) is found first; optional files that 404 are skipped', async () => {
    const ck = loadCheckpoint(Object.fromEntries(llama));
    const one = new Map([['config.json', llama.get('config.json')!], ['tokenizer.json', llama.get('tokenizer.json')!],
      ['model.safetensors', saveCheckpoint({ config: ck.config, params: ck.params })['model.safetensors']]]);
    hub.repos.set('lab/single', one);
    const { store, run } = fetchOf('lab/single');
    const got = await run();
    expect(got.manifest.files.map((f) => f.name).sort()).toEqual(['config.json', 'model.safetensors', 'tokenizer.json']);
    expect(hub.log).not.toContain('GET /lab/single/resolve/main/model.safetensors.index.json');
    expect(loadCheckpoint(Object.fromEntries(store.files)).params.get('model.norm.weight')).toEqual(ck.params.get('model.norm.weight'));
  });

  it('a revision goes into the URL; a token is sent as Authorization: Bearer', async () => {
    hub.tokens.set('lab/hf-llama', 'hf_secret');
    await fetchOf('lab/hf-llama', { token: 'hf_secret' }).run();
    const e = await refusal(fetchOf('lab/hf-llama@v2', { token: 'hf_secret' }).run());
    expect(e.kind).toBe('missing');
    expect(e.message).toMatch(/lab\/hf-llama has no revision 'v2'/);
  });
});

describe('Hub client: refusals', () => {
  it('401 without a token: gated or private, and how to pass a token; 403 with one: the token was refused', async () => {
    hub.tokens.set('lab/hf-llama', 'hf_secret');
    const e = await refusal(fetchOf('lab/hf-llama', { tokenHint: 'set HF_TOKEN' }).run());
    expect(e.kind).toBe('unauthorized');
    expect(e.message).toMatch(/lab\/hf-llama is gated: accept its license on the model page \(HTTP 401 for config.json\); pass a token that can read it: set HF_TOKEN/);
    const e2 = await refusal(fetchOf('lab/hf-llama', { token: 'hf_wrong' }).run());
    expect(e2.kind).toBe('gated');
    expect(e2.message).toMatch(/HTTP 403.*the token given was refused/);
    // An unknown repo answers 401 RepoNotFound on the Hub (it cannot tell missing from private).
    const e3 = await refusal(fetchOf('nobody/nothing').run());
    expect(e3.message).toMatch(/nobody\/nothing was not found, or is private \(HTTP 401/);
  });

  it('404 names the file: no config.json, no weights, no tokenizer.json', async () => {
    const drop = (...names: string[]) => new Map([...llama].filter(([n]) => !names.includes(n)));
    hub.repos.set('lab/no-config', drop('config.json'));
    expect((await refusal(fetchOf('lab/no-config').run())).message).toMatch(/lab\/no-config has no config.json \(HTTP 404 for http:.*\/lab\/no-config\/resolve\/main\/config.json\)/);
    hub.repos.set('lab/no-weights', drop('model.safetensors.index.json'));
    expect((await refusal(fetchOf('lab/no-weights').run())).message).toMatch(/has neither model.safetensors nor model.safetensors.index.json/);
    hub.repos.set('lab/no-tokenizer', drop('tokenizer.json'));
    expect((await refusal(fetchOf('lab/no-tokenizer').run())).message).toMatch(/lab\/no-tokenizer has no tokenizer.json/);
    hub.repos.set('lab/no-shard', drop('model-00002-of-00003.safetensors'));
    const e = await refusal(fetchOf('lab/no-shard').run());
    expect(e.kind).toBe('missing');
    expect(e.message).toMatch(/lab\/no-shard has no model-00002-of-00003.safetensors/);
    // Nothing large was fetched before the missing shard was found (sizes are asked first).
    expect(hub.log.filter((l) => /^GET .*model-0000\d/.test(l))).toEqual([]);
  });

  it('a model that is not Llama is named for what it is, before any weight is requested', async () => {
    const mistral = { ...JSON.parse(new TextDecoder().decode(llama.get('config.json'))), model_type: 'mistral', architectures: ['MistralForCausalLM'] };
    hub.repos.set('lab/mistral', new Map([...llama, ['config.json', new TextEncoder().encode(JSON.stringify(mistral))]]));
    const e = await refusal(fetchOf('lab/mistral').run());
    expect(e.kind).toBe('not-llama');
    expect(e.message).toBe("lab/mistral is a 'mistral' model (MistralForCausalLM): this lab runs Llama-architecture models only (model_type \"llama\", LlamaForCausalLM), such as HuggingFaceTB/SmolLM2-135M");
    const biased = { ...JSON.parse(new TextDecoder().decode(llama.get('config.json'))), attention_bias: true };
    hub.repos.set('lab/biased', new Map([...llama, ['config.json', new TextEncoder().encode(JSON.stringify(biased))]]));
    expect((await refusal(fetchOf('lab/biased').run())).message).toMatch(/lab\/biased is a 'llama' model \(LlamaForCausalLM\), but its config.json describes a model this lab cannot run:\n {2}attention_bias true/);
    expect(hub.log.filter((l) => /safetensors/.test(l))).toEqual([]);
  });

  it('a truncated download is refused (and resumed with a Range request on the next fetch); a corrupt header is refused and dropped', async () => {
    const shard = 'model-00002-of-00003.safetensors';
    hub.faults.set(`lab/hf-llama/${shard}`, { cutAt: 40_000 });
    const store = new MemoryStore();
    const e = await refusal(fetchOf('lab/hf-llama', { store }).run());
    expect(e.kind).toBe('truncated');
    expect(e.message).toMatch(new RegExp(`lab/hf-llama/${shard}: the download (stopped|ended) at \\d+ of ${llama.get(shard)!.length} bytes`));
    expect(store.manifest).toBeNull();
    const held = store.parts.get(shard)!.length;
    expect(held).toBeGreaterThan(0);
    hub.faults.clear();
    hub.log.length = 0;
    await fetchOf('lab/hf-llama', { store }).run();
    expect(hub.log).toContain(`GET /lab/hf-llama/resolve/main/${shard} bytes=${held}-`);
    expect(store.files.get(shard)).toEqual(llama.get(shard));

    const bad = llama.get(shard)!.slice();
    bad.set(new TextEncoder().encode('{"x": nonsense'), 8);
    hub.repos.set('lab/corrupt', new Map([...llama, [shard, bad]]));
    const corrupt = new MemoryStore();
    const e2 = await refusal(fetchOf('lab/corrupt', { store: corrupt }).run());
    expect(e2.kind).toBe('corrupt');
    expect(e2.message).toMatch(new RegExp(`${shard} is not a valid safetensors file: the header is not JSON`));
    expect(corrupt.parts.has(shard)).toBe(false);
  });

  it('the size check sees sizes and the config before any weight is downloaded, and refuses for storage or the GPU\'s buffer limits', async () => {
    let seen: HubPlan | null = null;
    const limits = { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: 2 ** 27 };
    const check = (storageAvailable: number, l = limits) => (plan: HubPlan) => {
      seen = plan;
      const p = hubFitProblem(plan, { storageAvailable, limits: l });
      if (p) throw new HubError('too-big', p);
    };
    const e = await refusal(fetchOf('lab/hf-llama', { check: check(100_000) }).run());
    expect(e.kind).toBe('too-big');
    const total = [...llama.values()].reduce((s, b) => s + b.length, 0);
    expect(seen!.totalBytes).toBe(total);
    expect(e.message).toMatch(/lab\/hf-llama is 26\d\.\d KiB to download, but only 97.7 KiB of storage is free/);
    expect(hub.log.filter((l) => l.startsWith('GET') && /safetensors$/.test(l))).toEqual([]);
    const fp32 = seen!.fp32WeightBytes;
    expect(fp32).toBe(4 * [...loadCheckpoint(Object.fromEntries(llama)).params.values()].reduce((s, p) => s + p.length, 0));
    const e2 = await refusal(fetchOf('lab/hf-llama', { check: check(2 ** 30, { maxBufferSize: 2 ** 30, maxStorageBufferBindingSize: fp32 - 4 }) }).run());
    expect(e2.message).toMatch(/lab\/hf-llama's weights take .* as fp32, more than this GPU's maxStorageBufferBindingSize/);
    await fetchOf('lab/hf-llama', { check: check(2 ** 30) }).run();
  });

  it('ids that are not Hub ids, and an index naming a path outside the repo, are refused', async () => {
    for (const bad of ['', 'a/b/c', '../etc', 'org/na me', 'http://x/y', 'org/name@../x']) {
      expect(() => parseHubRef(bad), bad).toThrow(HubError);
    }
    expect(parseHubRef('HuggingFaceTB/SmolLM2-135M@refs/pr/1')).toEqual({ id: 'HuggingFaceTB/SmolLM2-135M', revision: 'refs/pr/1' });
    const idx = { metadata: {}, weight_map: { 'model.norm.weight': '../../evil.safetensors' } };
    hub.repos.set('lab/evil', new Map([...llama, ['model.safetensors.index.json', new TextEncoder().encode(JSON.stringify(idx))]]));
    expect((await refusal(fetchOf('lab/evil').run())).message).toMatch(/names the shard '..\/..\/evil.safetensors', not a .safetensors file name/);
  });
});
