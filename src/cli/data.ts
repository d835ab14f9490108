/**
 * The CLI's side of datasets and tokenizers: --data paths (files, folders, comma-separated) read
 * from disk, --tokenizer char|bpe:N|FILE.json built, --init DIR read, and the pre-tokenized corpus
 * cached on disk (.cache/tokens) keyed by the files' contents, the tokenizer and the split.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { isCheckpointFile, loadCheckpoint, type Checkpoint } from '../engine/io/checkpoint';
import { trainByteBpe } from '../engine/train/tokenizer/bpe-train';
import { EOS_TOKEN } from '../engine/train/tokenizer/byte-bpe';
import { DATA_EXTENSIONS, readDocuments, readTokenFile, tokenizeDocuments, writeTokenFile, type TokenCorpus } from '../engine/train/data/datasets';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import { CharTokenizer, type Tokenizer } from '../engine/train/tokenizer/tokenizer';
import { errnoWords, UsageError } from './common';

const sha256 = (b: Uint8Array | string) => createHash('sha256').update(b).digest('hex');

/** The data files a --data argument names: files as given, folders searched (sorted) for data files. */
export function dataFiles(arg: string): string[] {
  const out: string[] = [];
  const walk = (p: string) => {
    for (const e of readdirSync(p, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
      const full = path.join(p, e.name);
      if (e.isDirectory()) walk(full);
      else if (DATA_EXTENSIONS.includes(path.extname(e.name).toLowerCase())) out.push(full);
    }
  };
  for (const p of arg.split(',').filter(Boolean)) {
    let st;
    try {
      st = statSync(p);
    } catch (e) {
      throw new UsageError(`--data ${p}: ${errnoWords(e)} (expected a .txt, .jsonl/.json or .parquet file, or a folder of them)`);
    }
    if (st.isDirectory()) {
      const before = out.length;
      walk(p);
      if (out.length === before) throw new UsageError(`--data ${p}: the folder has no ${DATA_EXTENSIONS.join(' / ')} files`);
    } else out.push(p);
  }
  if (!out.length) throw new UsageError('--data names no files');
  return out;
}

export interface LoadedData {
  files: { path: string; bytes: number; sha256: string }[];
  documents: string[];
}

/** Reads and parses every file; a bad one stops with its name (nothing is trained on part of the data). */
export async function readData(paths: string[], field: string | undefined): Promise<LoadedData> {
  const files: LoadedData['files'] = [];
  const documents: string[] = [];
  for (const p of paths) {
    const bytes = new Uint8Array(readFileSync(p));
    try {
      documents.push(...(await readDocuments({ name: p, bytes }, { field })));
    } catch (e) {
      throw new UsageError(`--data: ${(e as Error).message}`);
    }
    files.push({ path: path.resolve(p), bytes: bytes.length, sha256: sha256(bytes) });
  }
  return { files, documents };
}

/**
 * --tokenizer: char (the data's characters), bpe:N (byte-level BPE with N tokens trained on the
 * data, with progress), or a tokenizer.json file (its tokenizer_config.json beside it is read too).
 */
export function buildTokenizer(arg: string, documents: string[], progress?: (done: number, total: number) => void): Tokenizer {
  if (arg === 'char') return CharTokenizer.fromText(documents.join(''));
  const bpe = /^bpe:(\d+)$/.exec(arg);
  if (bpe) {
    try {
      return trainByteBpe(documents.join(EOS_TOKEN), { vocabSize: Number(bpe[1]), onProgress: progress });
    } catch (e) {
      throw new UsageError(`--tokenizer ${arg}: ${(e as Error).message}`);
    }
  }
  if (!arg.endsWith('.json')) throw new UsageError(`--tokenizer must be char, bpe:N or a tokenizer.json file, got '${arg}'`);
  try {
    const json = JSON.parse(readFileSync(arg, 'utf8'));
    const cfgPath = path.join(path.dirname(arg), 'tokenizer_config.json');
    const cfg = existsSync(cfgPath) ? JSON.parse(readFileSync(cfgPath, 'utf8')) : undefined;
    return tokenizerFromJSON(json, cfg);
  } catch (e) {
    throw new UsageError(`--tokenizer ${arg}: ${(e as Error).message}`);
  }
}

/** --init DIR: a Hugging Face model directory or a lab checkpoint (every file of the folder is offered); `option` names the flag in errors. */
export function readInit(dir: string, option = '--init'): Checkpoint {
  const files = readFolderFiles(dir, option, isCheckpointFile);
  try {
    return loadCheckpoint(files);
  } catch (e) {
    throw new UsageError(`${option} ${dir}: ${(e as Error).message}`);
  }
}

/** The files of folder `dir` whose names `keep` accepts, as bytes by name; an unreadable folder is a UsageError naming `option`. */
export function readFolderFiles(dir: string, option: string, keep: (name: string) => boolean): Record<string, Uint8Array> {
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => statSync(path.join(dir, n)).isFile());
  } catch (e) {
    throw new UsageError(`${option} ${dir}: ${(e as Error).message}`);
  }
  return Object.fromEntries(names.filter(keep).map((n) => [n, new Uint8Array(readFileSync(path.join(dir, n)))]));
}

/** The token corpus of the documents, from the disk cache when these files were tokenized so before. */
export function cachedCorpus(data: LoadedData, tokenizer: Tokenizer, o: { field?: string; cacheDir: string }): { corpus: TokenCorpus; cached: boolean } {
  const key = sha256(JSON.stringify({ files: data.files.map((f) => f.sha256), field: o.field ?? 'text', tokenizer: sha256(JSON.stringify(tokenizer.toJSON())), split: 'v1:0.1' }));
  const file = path.join(o.cacheDir, `${key}.tok`);
  if (existsSync(file)) {
    try {
      return { corpus: readTokenFile(new Uint8Array(readFileSync(file))).corpus, cached: true };
    } catch {
      // A damaged cache file is rebuilt below.
    }
  }
  const corpus = tokenizeDocuments(data.documents, tokenizer, { valFraction: 0.1 });
  mkdirSync(o.cacheDir, { recursive: true });
  writeFileSync(file, writeTokenFile(corpus, { files: data.files }));
  return { corpus, cached: false };
}
