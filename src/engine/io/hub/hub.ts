/**
 * A Llama checkpoint from the Hugging Face Hub's file layout, `{endpoint}/{id}/resolve/{revision}/{file}`:
 * config.json, model.safetensors (or the shards model.safetensors.index.json names), tokenizer.json,
 * and tokenizer_config.json / generation_config.json when the repo has them. The same code runs in the
 * page and in Node (plain fetch); where the files go is the caller's HubStore (the page's Cache API,
 * the CLI's cache folder), so a model fetched once is read from there with no request at all.
 *
 * Order, so that a bad model costs no download: config.json is read and checked (Llama-compatible),
 * then every file's size is asked (HEAD), then the caller's `check` sees the sizes and the config and
 * may refuse, and only then are the files streamed, each verified against its announced size and, for
 * safetensors, its header. Errors are HubErrors whose message says what to do (a token, another id...).
 *
 * Not @huggingface/hub: its downloadFile hands back a Blob with no byte progress and routes through the
 * Hub's Xet storage when the server offers it; the plain resolve URLs are all this needs.
 */
import type { ModelConfig } from '../../model/config';
import { paramSpecs } from '../../model/config';
import { paramLayout } from '../../model/params';
import { modelConfigFromHf } from '../checkpoint';

export const DEFAULT_HUB_ENDPOINT = 'https://huggingface.co';
const INDEX = 'model.safetensors.index.json';

export type HubErrorKind = 'bad-id' | 'unauthorized' | 'gated' | 'missing' | 'not-llama' | 'truncated' | 'corrupt' | 'too-big' | 'http' | 'network' | 'cancelled';

export class HubError extends Error {
  constructor(readonly kind: HubErrorKind, message: string) {
    super(message);
    this.name = kind === 'cancelled' ? 'CancelledError' : 'HubError';
  }
}

export interface HubRef {
  id: string;
  revision: string;
}

/** `org/name` or `name`, optionally `@revision` (a branch, tag or commit). */
export function parseHubRef(text: string): HubRef {
  const t = text.trim();
  const at = t.indexOf('@');
  const id = at < 0 ? t : t.slice(0, at);
  const revision = at < 0 ? 'main' : t.slice(at + 1);
  // The Hub's repo names: letters, digits, '-', '_', '.'; at most one '/'. Anything else would build another URL.
  if (!/^([A-Za-z0-9][\w.-]*\/)?[A-Za-z0-9][\w.-]*$/.test(id) || id.includes('..')) {
    throw new HubError('bad-id', `'${text}' is not a Hugging Face model id (expected org/name, e.g. HuggingFaceTB/SmolLM2-135M, optionally @revision)`);
  }
  if (!/^[\w.\-/]+$/.test(revision) || revision.includes('..')) throw new HubError('bad-id', `'${revision}' is not a revision (a branch, tag or commit hash)`);
  return { id, revision };
}

export const hubRefText = (r: HubRef): string => (r.revision === 'main' ? r.id : `${r.id}@${r.revision}`);

/** A file of the model as stored: its name in the repo and its size in bytes. */
export interface HubFile {
  name: string;
  bytes: number;
}

export interface HubManifest {
  id: string;
  revision: string;
  files: HubFile[];
}

/** What the fetch knows before it downloads: the caller's size check sees this. */
export interface HubPlan {
  ref: HubRef;
  config: ModelConfig;
  files: HubFile[];
  /** Sum of the files' sizes: what the download writes to storage. */
  totalBytes: number;
  /** Bytes already held from an interrupted download (resumed, not fetched again). */
  heldBytes: number;
  /** The weights as the engine keeps them: one fp32 buffer (the safetensors are often bf16: half this). */
  fp32WeightBytes: number;
}

export interface HubProgress {
  file: string;
  fileDone: number;
  fileTotal: number;
  done: number;
  total: number;
}

/** Where a model's files go; one store per model id and revision. */
export interface HubStore {
  /** The manifest of a complete earlier download, or null. */
  complete(): Promise<HubManifest | null>;
  /** Bytes kept of an interrupted download of `file` (resumed with a Range request); 0 when none. */
  partial(file: string): Promise<number>;
  /** A writer for `file` from byte `offset` (0 drops any partial bytes). */
  writer(file: string, offset: number): Promise<HubWriter>;
  /** Marks the download complete: the next fetch of this model is a cache hit. */
  finish(manifest: HubManifest): Promise<void>;
}

export interface HubWriter {
  write(chunk: Uint8Array): Promise<void>;
  /** The file is whole (its size checked): it becomes visible under its name. */
  commit(): Promise<void>;
  /** The download stopped: with `keep`, a store that resumes keeps the bytes written so far; else it drops them. */
  abandon(keep: boolean): Promise<void>;
}

export interface HubFetchOptions {
  store: HubStore;
  /** Default DEFAULT_HUB_ENDPOINT (Node: HF_ENDPOINT, the page: its setting). */
  endpoint?: string;
  /** A Hugging Face access token, sent as `Authorization: Bearer` (gated and private models). */
  token?: string;
  signal?: AbortSignal;
  fetch?: typeof fetch;
  onProgress?: (p: HubProgress) => void;
  /** Sees the sizes and the config before anything large is downloaded; throws (a HubError 'too-big') to refuse. */
  check?: (plan: HubPlan) => void | Promise<void>;
  /** How the token is passed, for the 401/403 message (default: both ways). */
  tokenHint?: string;
}

export interface HubFetched {
  manifest: HubManifest;
  /** Every file came from the store (no request was made). */
  cached: boolean;
}

const mb = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(2)} GiB` : n >= 2 ** 20 ? `${(n / 2 ** 20).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`);
export const formatHubBytes = mb;

/** A file name the repo may hold that is safe as a path segment (an index could name '../x'). */
const safeName = (n: string) => /^[\w][\w.-]*$/.test(n) && !n.includes('..');

/** Llama-compatible or a HubError naming what the model is. */
export function hubModelConfig(ref: HubRef, raw: Record<string, unknown>): ModelConfig {
  const arch = Array.isArray(raw.architectures) ? (raw.architectures as unknown[]).map(String) : [];
  const what = `${hubRefText(ref)} is ${raw.model_type !== undefined ? `a '${String(raw.model_type)}' model` : 'a model without model_type'}${arch.length ? ` (${arch.join(', ')})` : ''}`;
  if ((raw.model_type !== undefined && raw.model_type !== 'llama') || (arch.length > 0 && !arch.includes('LlamaForCausalLM'))) {
    throw new HubError('not-llama', `${what}: this lab runs Llama-architecture models only (model_type "llama", LlamaForCausalLM), such as HuggingFaceTB/SmolLM2-135M`);
  }
  try {
    return modelConfigFromHf(raw);
  } catch (e) {
    throw new HubError('not-llama', `${what}, but ${(e as Error).message.replace(/^config\.json describes/, 'its config.json describes')}`);
  }
}

/** The size check shared by the page and the CLI: storage for the download, the adapter's buffer limits for the fp32 weights. */
export function hubFitProblem(plan: HubPlan, o: { storageAvailable?: number; limits?: { maxBufferSize: number; maxStorageBufferBindingSize: number } }): string | null {
  const need = plan.totalBytes - plan.heldBytes;
  if (o.storageAvailable !== undefined && need > o.storageAvailable) {
    return `${hubRefText(plan.ref)} is ${mb(plan.totalBytes)} to download, but only ${mb(o.storageAvailable)} of storage is free`;
  }
  const l = o.limits;
  if (l) {
    const limit = Math.min(l.maxBufferSize, l.maxStorageBufferBindingSize);
    if (plan.fp32WeightBytes > limit) {
      const which = l.maxBufferSize <= l.maxStorageBufferBindingSize ? 'maxBufferSize' : 'maxStorageBufferBindingSize';
      return `${hubRefText(plan.ref)}'s weights take ${mb(plan.fp32WeightBytes)} as fp32, more than this GPU's ${which} (${mb(limit)}): it cannot be trained here`;
    }
  }
  return null;
}

/**
 * A safetensors header check fed as the bytes stream in: a file whose header is not JSON, or whose
 * tensors do not end exactly at the file's end, is corrupt (caught before it reaches the importer).
 */
class HeaderCheck {
  private head = new Uint8Array(0);
  private checked = false;
  constructor(private readonly file: string, private readonly size: number) {}

  feed(chunk: Uint8Array): void {
    if (this.checked) return;
    if (this.head.length < 8 || this.head.length < 8 + this.headerLen()) {
      const next = new Uint8Array(this.head.length + chunk.length);
      next.set(this.head);
      next.set(chunk, this.head.length);
      this.head = next;
    }
    if (this.head.length < 8) return;
    const n = this.headerLen();
    if (n <= 1 || 8 + n > this.size) this.fail(`the header length ${n} does not fit the file's ${this.size} bytes`);
    if (this.head.length >= 8 + n) this.verify(n);
  }

  private headerLen(): number {
    if (this.head.length < 8) return 0;
    const v = new DataView(this.head.buffer, this.head.byteOffset, 8);
    return v.getUint32(0, true) + v.getUint32(4, true) * 2 ** 32;
  }

  private verify(n: number): void {
    this.checked = true;
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(this.head.subarray(8, 8 + n)));
    } catch (e) {
      return this.fail(`the header is not JSON (${(e as Error).message})`);
    }
    let end = 0;
    for (const [name, t] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const off = (t as { data_offsets?: unknown })?.data_offsets;
      if (!Array.isArray(off) || off.length !== 2 || !off.every((x) => Number.isSafeInteger(x))) return this.fail(`tensor ${name} has no data_offsets`);
      end = Math.max(end, off[1] as number);
    }
    if (8 + n + end !== this.size) this.fail(`its tensors end at byte ${8 + n + end}, the file has ${this.size}`);
    this.head = new Uint8Array(0);
  }

  done(): void {
    if (!this.checked) this.fail('the header ends past the end of the file');
  }

  private fail(why: string): never {
    this.checked = true;
    throw new HubError('corrupt', `${this.file} is not a valid safetensors file: ${why}`);
  }
}

/** Downloads (or finds in the store) the model's files; see the module comment for the order. */
export async function fetchHubModel(ref: HubRef, o: HubFetchOptions): Promise<HubFetched> {
  const held = await o.store.complete();
  if (held) return { manifest: held, cached: true };

  const endpoint = (o.endpoint || DEFAULT_HUB_ENDPOINT).replace(/\/+$/, '');
  const doFetch = o.fetch ?? globalThis.fetch.bind(globalThis);
  const url = (file: string) => `${endpoint}/${ref.id}/resolve/${encodeURIComponent(ref.revision)}/${file}`;
  const name = hubRefText(ref);
  const tokenHint = o.tokenHint ?? 'set HF_TOKEN (the CLI) or the token field (the page)';

  const request = async (file: string, init: { method?: string; headers?: Record<string, string> } = {}): Promise<Response> => {
    const headers: Record<string, string> = { ...init.headers };
    if (o.token) headers.Authorization = `Bearer ${o.token}`;
    try {
      return await doFetch(url(file), { method: init.method ?? 'GET', headers, signal: o.signal, redirect: 'follow' });
    } catch (e) {
      if (o.signal?.aborted) throw new HubError('cancelled', `download of ${name} cancelled`);
      throw new HubError('network', `cannot reach ${endpoint} for ${name}/${file}: ${(e as Error).message}${(e as Error).cause ? ` (${String((e as { cause?: { message?: string } }).cause?.message ?? (e as Error).cause)})` : ''}`);
    }
  };
  /** A response that is not a success, as the error a user can act on. */
  const refuse = (file: string, r: Response): never => {
    const code = r.headers.get('x-error-code') ?? '';
    const said = r.headers.get('x-error-message');
    if (r.status === 401 || r.status === 403) {
      const gated = code === 'GatedRepo' || /gated|restricted|access/i.test(said ?? '');
      const why = gated ? 'is gated: accept its license on the model page' : code === 'RepoNotFound' ? 'was not found, or is private' : 'needs authorization (gated or private)';
      throw new HubError(o.token ? 'gated' : 'unauthorized',
        `${name} ${why} (HTTP ${r.status} for ${file}); ${o.token ? 'the token given was refused: check that it can read this repo and that access was granted' : `pass a token that can read it: ${tokenHint}`}${said ? ` [${said}]` : ''}`);
    }
    if (r.status === 404) {
      const what = code === 'RepoNotFound' ? `no model ${ref.id} on ${endpoint}` : code === 'RevisionNotFound' ? `${ref.id} has no revision '${ref.revision}'` : `${name} has no ${file}`;
      throw new HubError('missing', `${what} (HTTP 404 for ${url(file)})`);
    }
    throw new HubError('http', `${url(file)}: HTTP ${r.status} ${r.statusText}${said ? ` [${said}]` : ''}`);
  };
  const getJson = async (file: string, optional: boolean): Promise<{ text: string; json: Record<string, unknown> } | null> => {
    const r = await request(file);
    if (optional && r.status === 404) return null;
    if (!r.ok) refuse(file, r);
    const text = await r.text();
    try {
      const json = JSON.parse(text);
      if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new Error('not a JSON object');
      return { text, json };
    } catch (e) {
      throw new HubError('corrupt', `${name}/${file} is not a JSON object: ${(e as Error).message}`);
    }
  };
  const size = async (file: string, optional: boolean): Promise<number | null> => {
    const r = await request(file, { method: 'HEAD' });
    if (optional && r.status === 404) return null;
    if (!r.ok) refuse(file, r);
    const n = Number(r.headers.get('content-length'));
    if (!r.headers.has('content-length') || !Number.isSafeInteger(n) || n < 0) throw new HubError('http', `${url(file)}: the server gives no Content-Length, so the download cannot be checked`);
    return n;
  };

  const cfg = (await getJson('config.json', false))!;
  const config = hubModelConfig(ref, cfg.json);
  const small = new Map<string, string>([['config.json', cfg.text]]);

  let weights: string[];
  const single = await size('model.safetensors', true);
  if (single !== null) weights = ['model.safetensors'];
  else {
    const idx = await getJson(INDEX, true);
    if (!idx) throw new HubError('missing', `${name} has neither model.safetensors nor ${INDEX} (this lab reads safetensors weights, not pytorch_model.bin)`);
    const map = idx.json.weight_map;
    if (!map || typeof map !== 'object' || Array.isArray(map)) throw new HubError('corrupt', `${name}/${INDEX} has no weight_map object`);
    weights = [...new Set(Object.values(map as Record<string, unknown>).map(String))].sort();
    const bad = weights.find((w) => !safeName(w) || !w.endsWith('.safetensors'));
    if (bad !== undefined || weights.length === 0) throw new HubError('corrupt', `${name}/${INDEX} names ${bad === undefined ? 'no shard' : `the shard '${bad}', not a .safetensors file name`}`);
    small.set(INDEX, idx.text);
  }
  const tokenizer = await getJson('tokenizer.json', true);
  if (!tokenizer) throw new HubError('missing', `${name} has no tokenizer.json (HTTP 404 for ${url('tokenizer.json')}); the lab trains with the model's own tokenizer`);
  small.set('tokenizer.json', tokenizer.text);
  for (const f of ['tokenizer_config.json', 'generation_config.json']) {
    const got = await getJson(f, true);
    if (got) small.set(f, got.text);
  }

  const enc = new TextEncoder();
  const bytesOf = new Map([...small].map(([f, t]) => [f, enc.encode(t)]));
  const files: HubFile[] = [...small.keys()].map((f) => ({ name: f, bytes: bytesOf.get(f)!.length }));
  for (const w of weights) files.push({ name: w, bytes: w === 'model.safetensors' ? single! : (await size(w, false))! });
  const totalBytes = files.reduce((s, f) => s + f.bytes, 0);
  let heldBytes = 0;
  const partial = new Map<string, number>();
  for (const w of weights) {
    const n = await o.store.partial(w);
    const want = files.find((f) => f.name === w)!.bytes;
    if (n > 0 && n < want) partial.set(w, n);
    heldBytes += n > 0 && n < want ? n : 0;
  }
  const plan: HubPlan = { ref, config, files, totalBytes, heldBytes, fp32WeightBytes: paramLayout(config).count * 4 };
  await o.check?.(plan);
  // Largest-first checks in the engine assume the weights fit; an fp32 tensor beyond 2^31 bytes could not be one JS array either.
  if (paramSpecs(config).some((s) => s.shape.reduce((a, b) => a * b, 1) * 4 > 2 ** 31)) throw new HubError('too-big', `${name} has a tensor over 2 GiB as fp32: too large for this lab`);

  let done = heldBytes;
  const report = (file: string, fileDone: number, fileTotal: number) => o.onProgress?.({ file, fileDone, fileTotal, done, total: totalBytes });
  for (const f of files) {
    const text = bytesOf.get(f.name);
    if (text) {
      const w = await o.store.writer(f.name, 0);
      await w.write(text);
      await w.commit();
      done += f.bytes;
      report(f.name, f.bytes, f.bytes);
      continue;
    }
    await download(f, partial.get(f.name) ?? 0);
  }
  const manifest: HubManifest = { id: ref.id, revision: ref.revision, files };
  await o.store.finish(manifest);
  return { manifest, cached: false };

  async function download(f: HubFile, from: number): Promise<void> {
    let r = await request(f.name, from > 0 ? { headers: { Range: `bytes=${from}-` } } : {});
    if (!r.ok) refuse(f.name, r);
    // A server that ignores Range sends the whole file (200): start over.
    let offset = r.status === 206 ? from : 0;
    if (r.status !== 206 && from > 0) done -= from;
    const expect = f.bytes - offset;
    const len = r.headers.get('content-length');
    if (len !== null && Number(len) !== expect) {
      await r.body?.cancel();
      if (offset > 0) {
        // The partial bytes no longer match what the server has (the file changed): start over.
        done -= offset;
        offset = 0;
        r = await request(f.name);
        if (!r.ok) refuse(f.name, r);
      } else throw new HubError('truncated', `${name}/${f.name}: the server announced ${f.bytes} bytes but sends ${len}; try again`);
    }
    const check = f.name.endsWith('.safetensors') && offset === 0 ? new HeaderCheck(f.name, f.bytes) : null;
    const w = await o.store.writer(f.name, offset);
    let got = offset;
    try {
      if (!r.body) throw new HubError('truncated', `${name}/${f.name}: the response has no body`);
      const reader = r.body.getReader();
      for (;;) {
        let step: ReadableStreamReadResult<Uint8Array>;
        try {
          step = await reader.read();
        } catch (e) {
          if (o.signal?.aborted) throw new HubError('cancelled', `download of ${name} cancelled at ${f.name} (${mb(got)} of ${mb(f.bytes)})`);
          throw new HubError('truncated', `${name}/${f.name}: the download stopped at ${got} of ${f.bytes} bytes (${(e as Error).message}); run it again to resume`);
        }
        if (step.done) break;
        if (got + step.value.length > f.bytes) throw new HubError('truncated', `${name}/${f.name}: the server sent more than the ${f.bytes} bytes it announced`);
        check?.feed(step.value);
        await w.write(step.value);
        got += step.value.length;
        done += step.value.length;
        report(f.name, got, f.bytes);
      }
      if (got !== f.bytes) throw new HubError('truncated', `${name}/${f.name}: the download ended at ${got} of ${f.bytes} bytes; run it again to resume`);
      check?.done();
    } catch (e) {
      // A corrupt file is not kept for resuming: its bytes are wrong from the start.
      await w.abandon(!(e instanceof HubError && e.kind === 'corrupt'));
      throw e;
    }
    await w.commit();
  }
}
