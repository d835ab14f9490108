/**
 * The page's "from the Hub" import: a model id fetched with the engine's Hub client (engine/io/hub)
 * into the browser's Cache API (one entry per id@revision/file, written only once a file is whole and
 * its size checked; a manifest entry marks a complete model, so a second import makes no request),
 * then handed to the data panel's checkpoint import as if its files had been dropped. Before any
 * weight is downloaded the size check compares the download with the storage the browser grants
 * (navigator.storage.estimate) and the weights with the adapter's buffer limits, and runs the
 * engine's memory plan of the next run with this model (preflight). Progress and cancel are here.
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import {
  fetchHubModel, hubFitProblem, HubError, hubRefText, parseHubRef, type HubManifest, type HubRef, type HubStore, type HubWriter,
} from '../engine/io/hub/hub';
import { trainOptionsFor } from '../worker/protocol';
import type { DataController } from './data-prep';
import type { LabStore } from './lab';
import { preflight } from './preflight';

export interface HubImportState {
  job: { id: string; file: string; done: number; total: number; phase: string } | null;
  error: string | null;
  /** The last model imported (its id@revision). */
  imported: string | null;
}

/** The part of the Cache API this uses (tests pass a Map-backed one). */
export interface HubCache {
  match(key: string): Promise<Response | undefined>;
  put(key: string, response: Response): Promise<void>;
  delete(key: string): Promise<boolean>;
}

/** Cache keys must be http(s) URLs; this host is never requested (.invalid cannot resolve). */
const KEY_BASE = 'https://hub-cache.invalid/';
const MARK = '.complete.json';

/** One model's files in the Cache API: no resuming (a file is kept only whole), atomic per file. */
export class CacheHubStore implements HubStore {
  private readonly prefix: string;
  constructor(private readonly cache: HubCache, ref: HubRef) {
    this.prefix = `${KEY_BASE}${ref.id}@${encodeURIComponent(ref.revision)}/`;
  }

  key(file: string): string {
    return this.prefix + file;
  }

  async complete(): Promise<HubManifest | null> {
    const r = await this.cache.match(this.key(MARK));
    if (!r) return null;
    try {
      const m = (await r.json()) as HubManifest;
      for (const f of m.files) {
        const hit = await this.cache.match(this.key(f.name));
        if (!hit || Number(hit.headers.get('content-length')) !== f.bytes) return null;
      }
      return m;
    } catch {
      return null;
    }
  }

  async partial(): Promise<number> {
    return 0;
  }

  async writer(file: string): Promise<HubWriter> {
    const chunks: Uint8Array[] = [];
    let bytes = 0;
    return {
      write: async (c) => {
        // The reader may reuse its buffer: keep a copy.
        chunks.push(c.slice());
        bytes += c.length;
      },
      commit: async () => {
        await this.cache.put(this.key(file), new Response(new Blob(chunks as BlobPart[]), { headers: { 'Content-Length': String(bytes), 'Content-Type': 'application/octet-stream' } }));
      },
      abandon: async () => {
        chunks.length = 0;
      },
    };
  }

  async finish(m: HubManifest): Promise<void> {
    await this.cache.put(this.key(MARK), new Response(JSON.stringify(m), { headers: { 'Content-Type': 'application/json' } }));
  }

  /** The model's files as File objects (what a drop gives the data panel). */
  async files(m: HubManifest): Promise<File[]> {
    const out: File[] = [];
    for (const f of m.files) {
      const r = await this.cache.match(this.key(f.name));
      if (!r) throw new HubError('missing', `${f.name} left the browser's cache; import the model again`);
      out.push(new File([await r.blob()], f.name));
    }
    return out;
  }
}

export interface HubImportDeps {
  openCache?: () => Promise<HubCache>;
  fetch?: typeof fetch;
  /** Free bytes the browser grants this origin (undefined when it does not say). */
  storageAvailable?: () => Promise<number | undefined>;
}

async function browserStorage(): Promise<number | undefined> {
  const est = await globalThis.navigator?.storage?.estimate?.();
  return est?.quota !== undefined ? est.quota - (est.usage ?? 0) : undefined;
}

export class HubImportController {
  readonly state: StoreApi<HubImportState>;
  private abort: AbortController | null = null;

  constructor(private readonly lab: LabStore, private readonly data: Pick<DataController, 'importModel' | 'cancel'>, private readonly deps: HubImportDeps = {}) {
    this.state = createStore<HubImportState>()(() => ({ job: null, error: null, imported: null }));
  }

  /** Fetches `id[@revision]` (or finds it in the cache) and imports it as the next run's model. Resolves when settled. */
  async start(text: string, o: { endpoint?: string; token?: string } = {}): Promise<void> {
    if (this.abort) return;
    let ref: HubRef;
    try {
      ref = parseHubRef(text);
    } catch (e) {
      this.state.setState({ error: (e as Error).message });
      return;
    }
    const name = hubRefText(ref);
    const abort = new AbortController();
    this.abort = abort;
    this.state.setState({ error: null, job: { id: name, file: 'config.json', done: 0, total: 0, phase: 'asking the Hub' } });
    try {
      const cache = await (this.deps.openCache ?? (() => caches.open('lab-hub')))();
      const store = new CacheHubStore(cache, ref);
      let last = 0;
      const got = await fetchHubModel(ref, {
        store, endpoint: o.endpoint?.trim() || undefined, token: o.token?.trim() || undefined, signal: abort.signal, fetch: this.deps.fetch,
        tokenHint: 'paste a Hugging Face access token in the token field under "Hub settings"',
        check: async (plan) => {
          const limits = this.gpuLimits();
          const problem = hubFitProblem(plan, { storageAvailable: await (this.deps.storageAvailable ?? browserStorage)(), limits })
            ?? this.planProblem(plan.config, limits);
          if (problem) throw new HubError('too-big', problem);
        },
        onProgress: (p) => {
          // A store update per network chunk would re-render the panel hundreds of times a second.
          const now = Date.now();
          if (p.done < p.total && now - last < 100) return;
          last = now;
          this.state.setState({ job: { id: name, file: p.file, done: p.done, total: p.total, phase: 'downloading' } });
        },
      });
      if (abort.signal.aborted) throw new HubError('cancelled', `download of ${name} cancelled`);
      this.state.setState({ job: { id: name, file: '', done: 1, total: 1, phase: got.cached ? 'reading the cached model' : 'importing' } });
      const files = await store.files(got.manifest);
      this.abort = null;
      this.state.setState({ job: null });
      const ok = await this.data.importModel(files, name);
      this.state.setState(ok ? { imported: name } : {});
    } catch (e) {
      const cancelled = abort.signal.aborted || (e as Error).name === 'CancelledError';
      this.state.setState({ job: null, error: cancelled ? `download of ${name} cancelled (files already complete stay cached)` : (e as Error).message });
    } finally {
      if (this.abort === abort) this.abort = null;
    }
  }

  cancel(): void {
    if (this.abort) this.abort.abort();
    else this.data.cancel();
  }

  private gpuLimits() {
    const g = this.lab.getState().gpu;
    return g.state === 'available' ? g.limits : undefined;
  }

  /** The engine's memory plan of the next run with this model: a buffer over the adapter's limits refuses it. */
  private planProblem(model: Parameters<typeof trainOptionsFor>[0]['model'], limits: ReturnType<HubImportController['gpuLimits']>): string | null {
    if (!limits) return null;
    let p;
    try {
      p = preflight(trainOptionsFor({ ...this.lab.getState().draft, model }), limits).problem;
    } catch {
      // A draft this model makes invalid (e.g. a context past its positions) is the form's to report.
      return null;
    }
    return p ? `this model cannot train here with the current settings: ${p}` : null;
  }
}
