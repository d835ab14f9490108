/**
 * The next run's data and tokenizer, as the page prepares them: files dropped or picked are checked
 * (a file that is not text is refused by name, and what was loaded stays), tokenized in the data
 * worker into the token cache, and the draft then names the prepared data and the tokenizer, so the
 * memory plan sees the tokenizer's vocabulary. A dropped checkpoint (config.json + safetensors +
 * tokenizer.json) becomes the draft's model and tokenizer. Kept apart from the lab store: it holds
 * File objects and a worker.
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import type { HfTokenizerJSON } from '../engine/train/tokenizer/tokenizer';
import { isZip, unpackZips } from '../worker/checkpoint-archive';
import type { DataWorkerClient } from '../worker/data-client';
import type { ImportedModel } from '../worker/data-protocol';
import type { FileInfo, PreparedData, TokenizerChoice } from '../worker/prepare';
import { BUNDLED_DATASET, type CheckpointBlob, DEFAULT_RUN_CONFIG, type RunConfig } from '../worker/protocol';
import type { LabStore } from './lab';

export interface DataPrepState {
  /** Accepted data files (none: the bundled text). */
  files: File[];
  infos: FileInfo[];
  /** The text field of records files. */
  field: string;
  tokenizer: TokenizerChoice;
  /** The job in the data worker, with its progress. */
  job: { what: string; phase: string; done: number; total: number } | null;
  prepared: PreparedData | null;
  imported: { name: string; files: File[]; model: ImportedModel } | null;
  error: string | null;
  /** Counts finished actions (prepared, refused, cancelled): what waits for one watches it. */
  settled: number;
}

export type DataPrepStore = StoreApi<DataPrepState>;

export type DataJobs = Pick<DataWorkerClient, 'run' | 'cancel'>;

const CHECKPOINT_NAME = /^(config\.json|adapter_config\.json|model\.safetensors\.index\.json|.*\.safetensors|tokenizer_config\.json|generation_config\.json)$/;

/** A drop is a checkpoint when it holds a config.json or weights; a lone tokenizer.json is a tokenizer. */
export function classifyDrop(files: File[]): 'checkpoint' | 'tokenizer' | 'data' {
  if (files.some((f) => f.name === 'config.json' || f.name.endsWith('.safetensors'))) return 'checkpoint';
  if (files.length === 1 && /tokenizer.*\.json$/.test(files[0].name)) return 'tokenizer';
  return 'data';
}

export class DataController {
  readonly state: DataPrepStore;
  private committed: Pick<DataPrepState, 'tokenizer' | 'field'> = { tokenizer: { kind: 'char' }, field: 'text' };

  constructor(private readonly lab: LabStore, private readonly jobs: DataJobs, private readonly bundled: () => Promise<File>) {
    this.state = createStore<DataPrepState>()(() => ({ files: [], infos: [], field: 'text', tokenizer: { kind: 'char' }, job: null, prepared: null, imported: null, error: null, settled: 0 }));
  }

  private set(patch: Partial<DataPrepState>) {
    this.state.setState(patch);
  }

  /** Ends an action with a problem (null: it took). */
  private settle(patch: Partial<DataPrepState>) {
    this.state.setState((s) => ({ ...patch, job: null, settled: s.settled + 1 }));
  }

  /** Files dropped or picked: a checkpoint, a tokenizer.json, or data replacing the current data. */
  async drop(dropped: File[]): Promise<void> {
    if (dropped.length === 0) return;
    let files: File[];
    try {
      // An exported checkpoint (or any HF model folder) may come zipped.
      files = await unpackZips(dropped);
    } catch (e) {
      this.settle({ error: (e as Error).message });
      return;
    }
    const kind = classifyDrop(files);
    if (kind === 'checkpoint') return this.importCheckpoint(files, dropped.length === 1 && isZip(dropped[0]) ? dropped[0].name : undefined);
    if (kind === 'tokenizer') return this.tokenizerFile(files[0]);
    let infos: FileInfo[];
    try {
      this.set({ job: { what: 'inspect', phase: 'checking the files', done: 0, total: files.length } });
      infos = (await this.jobs.run({ type: 'inspect', files })).files;
    } catch (e) {
      this.settle({ error: (e as Error).message });
      return;
    }
    const fields = [...new Set(infos.flatMap((i) => i.fields))];
    const field = fields.length === 0 || fields.includes(this.state.getState().field) ? this.state.getState().field : fields.includes('text') ? 'text' : fields[0];
    await this.prepare({ files, infos, field });
  }

  /** A tokenizer.json for the data (GPT-2-style or Llama-style, loaded through @huggingface/tokenizers). */
  async tokenizerFile(f: File): Promise<void> {
    let json: unknown;
    try {
      json = JSON.parse(await f.text());
    } catch (e) {
      this.settle({ error: `${f.name} is not JSON: ${(e as Error).message}` });
      return;
    }
    if (!json || typeof json !== 'object' || typeof (json as { model?: unknown }).model !== 'object') {
      this.settle({ error: `${f.name} is not a Hugging Face tokenizer.json (no "model" object)` });
      return;
    }
    await this.prepare({ tokenizer: { kind: 'file', name: f.name, json: json as HfTokenizerJSON } });
  }

  /** The imported checkpoint's files as the workers take them (bytes; .json as text), or null without one. */
  async importedFiles(): Promise<CheckpointBlob | null> {
    const imp = this.state.getState().imported;
    if (!imp) return null;
    const out: CheckpointBlob = {};
    for (const f of imp.files) out[f.name] = f.name.endsWith('.json') ? await f.text() : new Uint8Array(await f.arrayBuffer());
    return out;
  }

  /** A model fetched from the Hub (hub-import.ts): imported as a dropped checkpoint folder, named by its id. Returns whether it took. */
  async importModel(files: File[], name: string): Promise<boolean> {
    await this.importCheckpoint(files, name);
    const s = this.state.getState();
    return s.error === null && s.imported?.name === name;
  }

  private async importCheckpoint(files: File[], archive?: string): Promise<void> {
    const name = archive ?? (files.find((f) => f.name === 'config.json') ? `${files.length} checkpoint files` : files[0].name);
    let model: ImportedModel;
    try {
      this.set({ job: { what: 'import', phase: 'reading the checkpoint', done: 0, total: files.length } });
      model = (await this.jobs.run({ type: 'import', files })).model;
    } catch (e) {
      this.settle({ error: `checkpoint not imported: ${(e as Error).message}` });
      return;
    }
    if (!model.tokenizer) {
      this.settle({ error: 'checkpoint not imported: it has no tokenizer.json (drop it together with config.json and the weights)' });
      return;
    }
    const imported = { name, files: files.filter((f) => CHECKPOINT_NAME.test(f.name) || f.name === 'tokenizer.json'), model };
    const { model: prevModel, init: prevInit } = this.lab.getState().draft;
    this.lab.getState().setDraft({ model: model.config, init: { name, params: model.params } });
    const ok = await this.prepare({ tokenizer: { kind: 'file', name: 'tokenizer.json (imported)', json: model.tokenizer.json as HfTokenizerJSON, config: model.tokenizer.config } }, imported);
    if (!ok) this.lab.getState().setDraft({ model: prevModel, init: prevInit });
  }

  /** The imported model is dropped: the draft goes back to the preset and a character tokenizer. */
  async forgetImport(): Promise<void> {
    this.set({ imported: null });
    this.lab.getState().setDraft({ model: undefined, init: undefined });
    await this.prepare({ tokenizer: { kind: 'char' } });
  }

  setTokenizer(tokenizer: TokenizerChoice): Promise<boolean> {
    return this.prepare({ tokenizer });
  }

  setField(field: string): Promise<boolean> {
    return this.prepare({ field });
  }

  /** Back to the bundled text (the tokenizer stays). */
  useBundled(): Promise<boolean> {
    return this.prepare({ files: [], infos: [] });
  }

  cancel(): void {
    this.jobs.cancel();
  }

  /** The files of the imported checkpoint a run config starts from. */
  initFiles(config: RunConfig): File[] | undefined {
    const imp = this.state.getState().imported;
    return config.init && imp && imp.name === config.init.name ? imp.files : undefined;
  }

  /**
   * Prepares the data with a changed setting; on success the draft names it, on failure or cancel
   * the settings go back to the last prepared ones. Returns whether it took.
   */
  private async prepare(patch: Partial<Pick<DataPrepState, 'files' | 'infos' | 'field' | 'tokenizer'>>, imported?: DataPrepState['imported']): Promise<boolean> {
    const before = this.state.getState();
    const next = { files: before.files, infos: before.infos, field: before.field, tokenizer: before.tokenizer, ...patch };
    this.set({ ...next, error: null });
    // The bundled text with its characters needs no preparation: the worker reads it as it always did.
    if (next.files.length === 0 && next.tokenizer.kind === 'char' && !imported && !before.imported) {
      this.commit(next, null, null);
      return true;
    }
    try {
      const files = next.files.length ? next.files : [await this.bundled()];
      this.set({ job: { what: 'prepare', phase: 'reading', done: 0, total: files.reduce((s, f) => s + f.size, 0) } });
      const { data } = await this.jobs.run({ type: 'prepare', files, field: next.field, tokenizer: next.tokenizer }, (phase, done, total) => this.set({ job: { what: 'prepare', phase, done, total } }));
      this.commit(next, data, imported ?? before.imported);
      return true;
    } catch (e) {
      const cancelled = (e as Error).name === 'CancelledError';
      // What was loaded stays: the files and settings of the last prepared data.
      this.settle({
        error: cancelled ? 'preparation cancelled: the previous data and tokenizer stay' : (e as Error).message,
        ...this.committed, files: before.files, infos: before.infos,
      });
      return false;
    }
  }

  private commit(next: Pick<DataPrepState, 'files' | 'infos' | 'field' | 'tokenizer'>, data: PreparedData | null, imported: DataPrepState['imported']) {
    this.committed = { tokenizer: next.tokenizer, field: next.field };
    this.settle({ ...next, prepared: data, imported, error: null });
    const name = next.files.length === 0 ? BUNDLED_DATASET : next.files.length === 1 ? next.files[0].name : `${next.files[0].name} + ${next.files.length - 1} more`;
    this.lab.getState().setDraft({
      dataset: name.slice(0, 200),
      tokenizer: data ? { kind: data.tokenizer.kind, vocabSize: data.tokenizer.vocabSize, source: data.tokenizer.source.slice(0, 200) } : undefined,
      data: data ? { key: data.key, files: data.files, field: data.field, tokens: data.stats.tokens, bytes: data.stats.bytes, documents: data.stats.documents } : undefined,
    });
    if (!data) this.lab.getState().setDraft({ dataset: DEFAULT_RUN_CONFIG.dataset });
  }
}
