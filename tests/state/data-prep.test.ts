import { describe, expect, it } from 'vitest';
import { createLabStore } from '../../src/state/lab';
import { classifyDrop, DataController, type DataJobs } from '../../src/state/data-prep';
import { CancelledError } from '../../src/worker/data-client';
import type { ToDataWorker } from '../../src/worker/data-protocol';
import { inspectFile, prepareData, type PreparedMeta, type TokenCache } from '../../src/worker/prepare';
import { importModel } from '../../src/worker/checkpoint-files';
import { planMemory } from '../../src/engine/plan/train-plan';
import { checkRunConfig, trainOptionsFor } from '../../src/worker/protocol';
import { readFileSync, readdirSync } from 'node:fs';
import { unzipSync } from 'fflate';
import { checkpointArchive } from '../../src/worker/checkpoint-archive';
import { saveCheckpoint } from '../../src/engine/io/checkpoint';
import { paramSpecs, PRESETS } from '../../src/engine/model/config';
import { hfTokenizerFiles } from '../../src/engine/train/trainer';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import path from 'node:path';

class MemoryCache implements TokenCache {
  metas = new Map<string, PreparedMeta>();
  async meta(key: string) { return this.metas.get(key) ?? null; }
  async create(key: string) {
    const sink = { write: () => {} };
    return { sinks: { train: sink, val: sink }, commit: async (m: PreparedMeta) => void this.metas.set(key, m), discard: async () => {} };
  }
}

/** The data worker's jobs run in-process; `hold` keeps the next prepare pending until cancelled. */
function inProcessJobs(): DataJobs & { hold: boolean; jobs: string[] } {
  const cache = new MemoryCache();
  let cancel: (() => void) | null = null;
  const jobs: string[] = [];
  const self = {
    hold: false,
    jobs,
    async run(job: ToDataWorker) {
      jobs.push(job.type);
      if (job.type === 'inspect') return { type: 'inspected', id: 0, files: await Promise.all(job.files.map(inspectFile)) };
      if (job.type === 'import') return { type: 'imported', id: 0, model: await importModel(job.files) };
      if (self.hold) {
        self.hold = false;
        return new Promise((_, reject) => (cancel = () => reject(new CancelledError())));
      }
      return { type: 'prepared', id: 0, data: await prepareData(job.files, { field: job.field, tokenizer: job.tokenizer }, cache) };
    },
    cancel: () => cancel?.(),
  };
  return self as unknown as DataJobs & { hold: boolean; jobs: string[] };
}

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 6000);
const file = (name: string, body: string | Uint8Array) => new File([body as BlobPart], name);
const bundled = async () => file('tinyshakespeare.txt', text);

function setup() {
  const lab = createLabStore();
  const jobs = inProcessJobs();
  const data = new DataController(lab, jobs, bundled);
  return { lab, jobs, data };
}

describe('DataController', () => {
  it('a dropped text sets the draft’s data and tokenizer; the memory plan follows the tokenizer’s vocabulary', async () => {
    const { lab, data } = setup();
    const planOf = () => planMemory(trainOptionsFor(lab.getState().draft)).total;
    await data.drop([file('a.txt', 'hello world, hello lab.\n'.repeat(40))]);
    const d = lab.getState().draft;
    expect(d.dataset).toBe('a.txt');
    expect(d.tokenizer).toMatchObject({ kind: 'char', vocabSize: new Set('hello world, hello lab.\n').size });
    expect(trainOptionsFor(d).model.vocab_size).toBe(d.tokenizer!.vocabSize);
    expect(checkRunConfig(d)).toBeNull();
    const charPlan = planOf();
    await data.setTokenizer({ kind: 'bpe', vocabSize: 1000 });
    expect(lab.getState().draft.tokenizer).toMatchObject({ kind: 'bpe', source: 'bpe:1000' });
    expect(trainOptionsFor(lab.getState().draft).model.vocab_size).toBe(lab.getState().draft.tokenizer!.vocabSize);
    expect(planOf()).toBeGreaterThan(charPlan);
  });

  it('a refused file names itself and leaves the loaded data, settings and draft as they were', async () => {
    const { lab, data } = setup();
    await data.drop([file('good.txt', text)]);
    const draft = lab.getState().draft;
    const before = data.state.getState();
    await data.drop([file('picture.txt', new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0, 0, 0, 0]))]);
    const after = data.state.getState();
    expect(after.error).toMatch(/picture\.txt is a PNG image, not text/);
    expect(after.files).toBe(before.files);
    expect(after.prepared).toBe(before.prepared);
    expect(after.settled).toBe(before.settled + 1);
    expect(lab.getState().draft).toBe(draft);
  });

  it('cancel keeps the last prepared tokenizer and says so', async () => {
    const { lab, jobs, data } = setup();
    await data.drop([file('good.txt', text)]);
    const draft = lab.getState().draft;
    jobs.hold = true;
    const pending = data.setTokenizer({ kind: 'bpe', vocabSize: 4000 });
    expect(data.state.getState().job).not.toBeNull();
    data.cancel();
    expect(await pending).toBe(false);
    const s = data.state.getState();
    expect(s.error).toMatch(/cancelled/);
    expect(s.tokenizer).toEqual({ kind: 'char' });
    expect(s.job).toBeNull();
    expect(lab.getState().draft).toBe(draft);
  });

  it('the bundled text with characters needs no preparation; another tokenizer prepares it', async () => {
    const { lab, jobs, data } = setup();
    await data.setTokenizer({ kind: 'char' });
    expect(jobs.jobs).toEqual([]);
    expect(lab.getState().draft.data).toBeUndefined();
    await data.setTokenizer({ kind: 'bpe', vocabSize: 300 });
    expect(lab.getState().draft).toMatchObject({ dataset: 'tinyshakespeare', tokenizer: { vocabSize: 300 } });
    expect(lab.getState().draft.data?.files).toEqual([{ name: 'tinyshakespeare.txt', bytes: text.length }]);
  });

  it('the HF fixture dropped as files becomes the draft’s model, tokenizer and init', async () => {
    const { lab, data } = setup();
    const dirs = ['tests/fixtures/hf-llama/model', 'tests/fixtures/hf-llama/tokenizer'];
    const files = dirs.flatMap((d) => readdirSync(d).filter((n) => n !== 'logits.json' && n !== 'ids.json').map((n) => file(n, new Uint8Array(readFileSync(path.join(d, n))))));
    expect(classifyDrop(files)).toBe('checkpoint');
    await data.drop(files);
    const s = data.state.getState();
    expect(s.error).toBeNull();
    const d = lab.getState().draft;
    expect(d.model).toMatchObject({ hidden_size: 64, vocab_size: 320, num_key_value_heads: 2 });
    expect(d.init?.params).toBeGreaterThan(0);
    expect(d.tokenizer?.kind).toBe('hf');
    expect(trainOptionsFor(d).model.vocab_size).toBe(320);
    expect(checkRunConfig(d)).toBeNull();
    expect(data.initFiles(d)?.map((f) => f.name).sort()).toContain('model.safetensors.index.json');
    // A config the engine does not run is refused by key, and the draft keeps the imported model.
    const cfg = JSON.parse(readFileSync('tests/fixtures/hf-llama/model/config.json', 'utf8'));
    await data.drop(files.map((f) => (f.name === 'config.json' ? file('config.json', JSON.stringify({ ...cfg, hidden_act: 'gelu' })) : f)));
    expect(data.state.getState().error).toMatch(/hidden_act/);
    expect(lab.getState().draft.model).toEqual(d.model);
    await data.forgetImport();
    expect(lab.getState().draft).toMatchObject({ model: undefined, init: undefined, tokenizer: undefined });
  });

  it('a run’s export (one zip: its HF folder) dropped back becomes the draft’s model, tokenizer and init', async () => {
    const { lab, data } = setup();
    const tok = new CharTokenizer([...new Set(text)].sort());
    const config = { ...PRESETS.micro, vocab_size: tok.vocabSize };
    const params = new Map(paramSpecs(config).map((p) => [p.name, Float32Array.from({ length: p.shape.reduce((a, b) => a * b, 1) }, (_, i) => Math.sin(i) / 10)]));
    const files = saveCheckpoint({ config, params, extra: { tokenizer: tok.toJSON(), hfTokenizer: hfTokenizerFiles(tok) } });
    const zip = checkpointArchive('micro-fp32-b8-t32', files);
    // Hugging Face's names in the run's folder; the lab's own state stays out.
    expect(Object.keys(unzipSync(zip)).sort()).toEqual(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json'].map((n) => `micro-fp32-b8-t32/${n}`));
    await data.drop([file('micro-fp32-b8-t32.zip', zip)]);
    expect(data.state.getState().error).toBeNull();
    const d = lab.getState().draft;
    expect(d.init?.name).toBe('micro-fp32-b8-t32.zip');
    expect(d.model).toMatchObject({ hidden_size: config.hidden_size, vocab_size: tok.vocabSize });
    expect(d.tokenizer).toMatchObject({ kind: 'hf', vocabSize: tok.vocabSize });
    expect(checkRunConfig(d)).toBeNull();
    const init = data.initFiles(d)!;
    const weights = new Uint8Array(await init.find((f) => f.name === 'model.safetensors')!.arrayBuffer());
    expect(weights).toEqual(files['model.safetensors']);
    // A zip that is not one is refused by name; what was loaded stays.
    await data.drop([file('broken.zip', 'not a zip')]);
    expect(data.state.getState().error).toMatch(/broken\.zip/);
    expect(lab.getState().draft.init?.name).toBe('micro-fp32-b8-t32.zip');
  });
});
