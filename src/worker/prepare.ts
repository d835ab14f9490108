/**
 * The page's data preparation, run in the data worker (pure over Blobs and a token cache, so Node
 * tests run it too): files are checked, read in chunks, the tokenizer built (characters of the data,
 * byte-level BPE trained on a sample, or a given tokenizer.json), and the text tokenized once into
 * a cached token corpus (token-stream.ts) keyed by the files' contents, the text field and the
 * tokenizer: a second run on the same data skips all of it. Memory stays bounded by a chunk, except
 * for .json and .parquet files, which their readers take whole (up to WHOLE_FILE_LIMIT).
 */
import { parquetMetadata, parquetSchema } from 'hyparquet';
import { trainByteBpe } from '../engine/train/tokenizer/bpe-train';
import { EOS_TOKEN } from '../engine/train/tokenizer/byte-bpe';
import { DATA_EXTENSIONS, extOf, readDocuments, TEXT_EXTENSIONS, TextChunks, textOf } from '../engine/train/data/datasets';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import { CharTokenizer, type HfTokenizerJSON, type Tokenizer } from '../engine/train/tokenizer/tokenizer';
import { type CorpusStats, CorpusWriter, type TokenSink, tokenWidth, VAL_EVERY } from '../engine/train/data/token-stream';
import type { Split } from '../engine/train/data/data';

export const CHUNK_BYTES = 4 << 20;
export const WHOLE_FILE_LIMIT = 256 << 20;
/** BPE merges are learned from the first this-many characters of the data (its statistics settle long before). */
export const BPE_SAMPLE_CHARS = 4 << 20;

export type TokenizerChoice =
  | { kind: 'char' }
  | { kind: 'bpe'; vocabSize: number }
  | { kind: 'file'; name: string; json: HfTokenizerJSON; config?: Record<string, unknown> };

/** What the cache keeps beside the tokens, and what the page shows of prepared data. */
export interface PreparedMeta {
  key: string;
  files: { name: string; bytes: number }[];
  field: string;
  tokenizer: { kind: Tokenizer['kind']; vocabSize: number; eosId: number | null; source: string };
  /** The tokenizer as tokenizerFromJSON reads it back. */
  tokenizerJSON: object;
  width: 2 | 4;
  stats: CorpusStats;
}

export interface PreparedData extends Omit<PreparedMeta, 'tokenizerJSON'> {
  /** Came from the cache (nothing was tokenized). */
  cached: boolean;
}

export interface TokenCacheWriter {
  sinks: Record<Split, TokenSink>;
  commit(meta: PreparedMeta): Promise<void>;
  /** Removes what was written (a preparation that failed leaves nothing taking storage). */
  discard(): Promise<void>;
}

export interface TokenCache {
  meta(key: string): Promise<PreparedMeta | null>;
  create(key: string, width: 2 | 4): Promise<TokenCacheWriter>;
  /** Bytes the cache may still take (the browser's quota less its usage), or null when unknown. */
  free?(): Promise<number | null>;
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(0)} MiB`;
const STORAGE_HINT = 'free some of this site\'s storage in the browser (site settings → storage: earlier token caches are kept there) or use less data';

export type Progress = (phase: string, done: number, total: number) => void;

export interface FileInfo {
  name: string;
  bytes: number;
  /** String fields of the records (.jsonl/.json objects, .parquet columns) seen at the file's start, most text first; empty for plain text. */
  fields: string[];
}

const describeChoice = (c: TokenizerChoice) => (c.kind === 'char' ? 'char' : c.kind === 'bpe' ? `bpe:${c.vocabSize}` : c.name);

async function sha256Hex(data: Uint8Array | string): Promise<string> {
  const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
  const d = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes as BufferSource));
  return Array.from(d, (x) => x.toString(16).padStart(2, '0')).join('');
}

/** Where a plain-text file's validation part starts (its last 1/VAL_EVERY of bytes). */
const valStart = (file: Blob) => Math.floor(file.size * (1 - 1 / VAL_EVERY));

/** The file in chunks, cut at the same places whatever reads it (the content digest depends on them). */
async function* chunksOf(file: File): AsyncGenerator<{ bytes: Uint8Array; at: number }> {
  const cut = TEXT_EXTENSIONS.includes(extOf(file.name)) ? valStart(file) : 0;
  const ends = [...(cut > 0 ? [cut] : []), file.size];
  let at = 0;
  for (const end of ends) {
    while (at < end) {
      const to = Math.min(end, at + CHUNK_BYTES);
      yield { bytes: new Uint8Array(await file.slice(at, to).arrayBuffer()), at };
      at = to;
    }
  }
}

/** The file's kind, and the fields its first records have; a file that is not text is refused with its name. */
export async function inspectFile(file: File): Promise<FileInfo> {
  const ext = extOf(file.name);
  if (!DATA_EXTENSIONS.includes(ext)) throw new Error(`${file.name}: unsupported file type "${ext || 'none'}" (want ${DATA_EXTENSIONS.join(', ')})`);
  if (file.size === 0) throw new Error(`${file.name} is empty`);
  const head = new Uint8Array(await file.slice(0, Math.min(file.size, 1 << 20)).arrayBuffer());
  if (ext === '.parquet') {
    if (file.size > WHOLE_FILE_LIMIT) throw new Error(`${file.name} is ${(file.size / 2 ** 20).toFixed(0)} MiB; .parquet files are read whole, up to ${WHOLE_FILE_LIMIT / 2 ** 20} MiB`);
    let fields: string[];
    try {
      fields = parquetSchema(parquetMetadata(await file.arrayBuffer())).children.map((c) => c.element.name);
    } catch (e) {
      throw new Error(`${file.name} is not a Parquet file: ${(e as Error).message}`);
    }
    return { name: file.name, bytes: file.size, fields };
  }
  const text = new TextChunks(file.name).decode(head, head.length === file.size);
  if (ext === '.json' && file.size > WHOLE_FILE_LIMIT) throw new Error(`${file.name} is ${(file.size / 2 ** 20).toFixed(0)} MiB; .json files are read whole, up to ${WHOLE_FILE_LIMIT / 2 ** 20} MiB (use .jsonl for more)`);
  // String fields, the one with the most text first (the likely text field when there is no "text").
  const fields = new Map<string, number>();
  const addFields = (v: unknown) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) for (const [k, x] of Object.entries(v)) if (typeof x === 'string') fields.set(k, (fields.get(k) ?? 0) + x.length);
  };
  const parse = (t: string): unknown => {
    try {
      return JSON.parse(t);
    } catch {
      return undefined; // a partial last line of the head, or a bad record the full read names
    }
  };
  if (ext === '.jsonl') for (const line of text.split('\n').slice(0, 50)) addFields(parse(line));
  else if (ext === '.json' && head.length === file.size) {
    const v = parse(text);
    const list = Array.isArray(v) ? v : v && typeof v === 'object' ? Object.values(v).find(Array.isArray) : undefined;
    if (Array.isArray(list)) list.slice(0, 50).forEach(addFields);
  }
  return { name: file.name, bytes: file.size, fields: [...fields].sort((a, b) => b[1] - a[1]).map(([k]) => k) };
}

interface Piece {
  text: string;
  split: Split;
  /** The piece ends its document (its end-of-text token follows). */
  end: boolean;
}

/**
 * A file's text as pieces in order: a plain-text file in line-aligned chunks, its last
 * 1/VAL_EVERY of bytes validating; a records file one document at a time, every VAL_EVERY-th (or,
 * with fewer, its last) validating. `onBytes` sees every chunk read.
 */
async function* piecesOf(file: File, field: string, onBytes: (b: Uint8Array) => void): AsyncGenerator<Piece> {
  const ext = extOf(file.name);
  const decoder = new TextChunks(file.name);
  if (TEXT_EXTENSIONS.includes(ext)) {
    const valFrom = valStart(file);
    let carry = '';
    for await (const { bytes, at } of chunksOf(file)) {
      onBytes(bytes);
      const to = at + bytes.length;
      const split: Split = at >= valFrom ? 'val' : 'train';
      const text = carry + decoder.decode(bytes, to === file.size);
      const boundary = to === valFrom || to === file.size;
      const cut = boundary ? text.length : text.lastIndexOf('\n') + 1;
      carry = text.slice(cut);
      if (cut > 0) yield { text: text.slice(0, cut), split, end: to === file.size };
    }
    return;
  }
  let index = 0;
  let held: string | null = null;
  let hasVal = false;
  const next = (doc: string): Piece | null => {
    const prev = held;
    held = doc;
    if (prev === null) return null;
    const split: Split = index++ % VAL_EVERY === VAL_EVERY - 1 ? 'val' : 'train';
    hasVal ||= split === 'val';
    return { text: prev, split, end: true };
  };
  const last = (): Piece | null => (held === null ? null : { text: held, split: hasVal || index === 0 ? 'train' : 'val', end: true });
  if (ext === '.jsonl') {
    let carry = '';
    let line = 0;
    for await (const { bytes, at } of chunksOf(file)) {
      onBytes(bytes);
      const lines = (carry + decoder.decode(bytes, at + bytes.length === file.size)).split('\n');
      carry = lines.pop() ?? '';
      if (at + bytes.length === file.size) lines.push(carry);
      for (const l of lines) {
        line++;
        if (l.trim() === '') continue;
        let v: unknown;
        try {
          v = JSON.parse(l);
        } catch (e) {
          throw new Error(`${file.name}: line ${line} is not JSON: ${(e as Error).message}`);
        }
        const p = next(textOf(file.name, `line ${line}`, v, field));
        if (p) yield p;
      }
    }
  } else {
    const parts: Uint8Array[] = [];
    for await (const { bytes } of chunksOf(file)) {
      onBytes(bytes);
      parts.push(bytes);
    }
    const bytes = new Uint8Array(await new Blob(parts as BlobPart[]).arrayBuffer());
    for (const doc of await readDocuments({ name: file.name, bytes }, { field })) {
      const p = next(doc);
      if (p) yield p;
    }
  }
  const p = last();
  if (p) yield p;
}

function buildTokenizer(choice: TokenizerChoice, chars: Set<number>, sample: string, progress: Progress): Tokenizer {
  if (choice.kind === 'char') {
    if (chars.size === 0) throw new Error('the data has no text');
    return new CharTokenizer([...chars].sort((a, b) => a - b).map((c) => String.fromCodePoint(c)));
  }
  if (choice.kind === 'bpe') return trainByteBpe(sample, { vocabSize: choice.vocabSize, onProgress: (d, t) => progress('training the BPE tokenizer', d, t) });
  try {
    return tokenizerFromJSON(choice.json, choice.config);
  } catch (e) {
    throw new Error(`${choice.name}: ${(e as Error).message}`);
  }
}

/** Prepares files for training (see the header); a bad file stops it with the file named, and nothing is cached. */
export async function prepareData(files: File[], o: { field?: string; tokenizer: TokenizerChoice }, cache: TokenCache, progress: Progress = () => {}): Promise<PreparedData> {
  if (files.length === 0) throw new Error('no data files');
  const field = o.field || 'text';
  const total = files.reduce((s, f) => s + f.size, 0);
  for (const f of files) await inspectFile(f);

  // Pass 1: content digests (and, for a tokenizer still to build, its characters or BPE sample).
  const needChars = o.tokenizer.kind === 'char';
  const needSample = o.tokenizer.kind === 'bpe';
  const chars = new Set<number>();
  let sample = '';
  const digests: string[] = [];
  let read = 0;
  for (const f of files) {
    const parts: string[] = [];
    const hashing: Promise<void>[] = [];
    const onBytes = (b: Uint8Array) => {
      const i = parts.length;
      parts.push('');
      hashing.push(sha256Hex(b).then((h) => void (parts[i] = h)));
      read += b.length;
      progress('reading', read, total);
    };
    if (needChars || (needSample && sample.length < BPE_SAMPLE_CHARS)) {
      for await (const p of piecesOf(f, field, onBytes)) {
        if (needChars) for (const c of p.text) chars.add(c.codePointAt(0)!);
        if (needSample && sample.length < BPE_SAMPLE_CHARS) sample += p.text.slice(0, BPE_SAMPLE_CHARS - sample.length) + (p.end ? EOS_TOKEN : '');
      }
    } else {
      for await (const { bytes } of chunksOf(f)) onBytes(bytes);
    }
    await Promise.all(hashing);
    digests.push(await sha256Hex(parts.join('')));
  }
  const choiceId = o.tokenizer.kind === 'file' ? await sha256Hex(JSON.stringify(o.tokenizer.json)) : describeChoice(o.tokenizer);
  const key = await sha256Hex(JSON.stringify({ v: 1, files: digests, field, tokenizer: choiceId, valEvery: VAL_EVERY, bpeSample: BPE_SAMPLE_CHARS }));
  const hit = await cache.meta(key);
  if (hit) {
    const { tokenizerJSON: _t, ...meta } = hit;
    return { ...meta, cached: true };
  }

  const tokenizer = buildTokenizer(o.tokenizer, chars, sample, progress);
  const width = tokenWidth(tokenizer.vocabSize);
  // A character tokenizer makes at most one token per byte: refused before writing when that cannot fit.
  const free = await cache.free?.();
  if (tokenizer.kind === 'char' && free != null && total * width > free) {
    throw new Error(`the token cache of this data needs up to ${mib(total * width)} of this browser's storage and ${mib(free)} is free: ${STORAGE_HINT}`);
  }
  const writer = await cache.create(key, width);
  const corpus = new CorpusWriter(tokenizer, writer.sinks);
  let meta: PreparedMeta;
  try {
    read = 0;
    for (const f of files) {
      for await (const p of piecesOf(f, field, (b) => progress('tokenizing', (read += b.length), total))) await corpus.add(p.text, p.split, p.end);
    }
    if (corpus.stats.tokens.val === 0) throw new Error('the data leaves nothing to validate on: give a text file, or records files of two or more documents');
    // Said apart from tokenizing: a small corpus is written to the cache only here, and "tokenizing 100%" came with the last read.
    progress('saving the tokens', total, total);
    meta = {
      key, files: files.map((f) => ({ name: f.name, bytes: f.size })), field,
      tokenizer: { kind: tokenizer.kind, vocabSize: tokenizer.vocabSize, eosId: tokenizer.eosId, source: describeChoice(o.tokenizer) },
      tokenizerJSON: tokenizer.toJSON(), width, stats: corpus.stats,
    };
    await writer.commit(meta);
  } catch (e) {
    await writer.discard().catch(() => {});
    if ((e as Error).name !== 'QuotaExceededError') throw e;
    const done = (corpus.stats.tokens.train + corpus.stats.tokens.val) * width;
    throw new Error(`this browser's storage for the page ran out after ${mib(done)} of tokens (nothing was kept): ${STORAGE_HINT}`);
  }
  const { tokenizerJSON: _t, ...shown } = meta;
  return { ...shown, cached: false };
}
