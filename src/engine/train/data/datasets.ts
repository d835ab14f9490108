/**
 * Training text from files, as pure functions over bytes (the page and the CLI share them):
 *   .txt / .md / .text   the whole file is one document;
 *   .jsonl               one JSON value a line: an object's `field` (default "text"), or a string;
 *   .json                an array of such values (or an object with one array of them);
 *   .parquet             the `field` column of every row (the format of Hugging Face datasets).
 * A file that is not text (NUL bytes, invalid UTF-8, a known binary signature) is refused with its
 * name. Documents are pre-tokenized once into a compact token corpus (uint16 when the vocabulary fits,
 * else uint32) split into train and validation by document, and knows the UTF-8 bytes of its
 * validation text, so a loss in nats per token converts to bits per byte.
 */
import { parquetReadObjects } from 'hyparquet';
import { TextDataset } from './data';
import type { Tokenizer } from '../tokenizer/tokenizer';

export interface SourceFile {
  name: string;
  bytes: Uint8Array;
}

export interface ReadOptions {
  /** The text field of .jsonl / .json objects and .parquet rows (default "text"). */
  field?: string;
}

export const TEXT_EXTENSIONS = ['.txt', '.text', '.md'];
export const DATA_EXTENSIONS = [...TEXT_EXTENSIONS, '.jsonl', '.json', '.parquet'];

const SIGNATURES: [string, number[]][] = [
  ['a PNG image', [0x89, 0x50, 0x4e, 0x47]], ['a JPEG image', [0xff, 0xd8, 0xff]], ['a GIF image', [0x47, 0x49, 0x46, 0x38]],
  ['a PDF', [0x25, 0x50, 0x44, 0x46]], ['a zip archive', [0x50, 0x4b, 0x03, 0x04]], ['a gzip file', [0x1f, 0x8b]],
  ['a Parquet file', [0x50, 0x41, 0x52, 0x31]],
];

export const extOf = (name: string) => {
  const i = name.lastIndexOf('.');
  return i < 0 ? '' : name.slice(i).toLowerCase();
};

/** The file as UTF-8 text (a leading BOM dropped), or an Error naming the file and what it looks like. */
export function decodeText(file: SourceFile): string {
  return new TextChunks(file.name).decode(file.bytes, true);
}

/**
 * A file's text decoded chunk by chunk (a file read as a stream), refused as decodeText refuses it:
 * a binary signature at its start, a NUL byte, invalid UTF-8 (a sequence cut between chunks is fine).
 */
export class TextChunks {
  private offset = 0;
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });

  constructor(private readonly name: string) {}

  decode(b: Uint8Array, last: boolean): string {
    if (this.offset === 0) {
      for (const [what, sig] of SIGNATURES) {
        if (b.length >= sig.length && sig.every((x, i) => b[i] === x)) throw new Error(`${this.name} is ${what}, not text`);
      }
    }
    const nul = b.indexOf(0);
    if (nul >= 0) throw new Error(`${this.name} is not text: it has a NUL byte at offset ${this.offset + nul} (a binary file?)`);
    this.offset += b.length;
    try {
      return this.decoder.decode(b, { stream: !last });
    } catch {
      throw new Error(`${this.name} is not text: it is not valid UTF-8 (another encoding, or a binary file)`);
    }
  }
}

/** The text of one record (a string, or an object's `field`), or an Error naming the file and place. */
export function textOf(file: string, where: string, v: unknown, field: string): string {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && !Array.isArray(v)) {
    const t = (v as Record<string, unknown>)[field];
    if (typeof t === 'string') return t;
    const keys = Object.keys(v).slice(0, 8).join(', ');
    throw new Error(`${file}: ${where} has no string field "${field}" (fields: ${keys || 'none'}; choose one with the text field option)`);
  }
  throw new Error(`${file}: ${where} is ${JSON.stringify(v)?.slice(0, 40)}, not a string or an object with "${field}"`);
}

/** The documents of one file (see the header for formats). */
export async function readDocuments(file: SourceFile, o: ReadOptions = {}): Promise<string[]> {
  const field = o.field ?? 'text';
  const ext = extOf(file.name);
  if (ext === '.parquet') {
    const b = file.bytes;
    const magic = [0x50, 0x41, 0x52, 0x31];
    if (b.length < 12 || !magic.every((x, i) => b[i] === x && b[b.length - 4 + i] === x)) throw new Error(`${file.name} is not a Parquet file (no PAR1 signature)`);
    let rows: Record<string, unknown>[];
    try {
      rows = await parquetReadObjects({ file: b.slice().buffer as ArrayBuffer, columns: [field] });
    } catch (e) {
      throw new Error(`${file.name}: cannot read column "${field}": ${(e as Error).message}`);
    }
    return rows.map((r, i) => textOf(file.name, `row ${i}`, r, field));
  }
  const text = decodeText(file);
  if (ext === '.jsonl') {
    const docs: string[] = [];
    text.split('\n').forEach((line, i) => {
      if (line.trim() === '') return;
      let v: unknown;
      try {
        v = JSON.parse(line);
      } catch (e) {
        throw new Error(`${file.name}: line ${i + 1} is not JSON: ${(e as Error).message}`);
      }
      docs.push(textOf(file.name, `line ${i + 1}`, v, field));
    });
    return docs;
  }
  if (ext === '.json') {
    let v: unknown;
    try {
      v = JSON.parse(text);
    } catch (e) {
      throw new Error(`${file.name} is not JSON: ${(e as Error).message}`);
    }
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      const arrays = Object.values(v).filter(Array.isArray);
      if (arrays.length !== 1) throw new Error(`${file.name}: want an array of documents (or an object holding exactly one array)`);
      v = arrays[0];
    }
    if (!Array.isArray(v)) throw new Error(`${file.name}: want an array of documents`);
    return v.map((x, i) => textOf(file.name, `item ${i}`, x, field));
  }
  if (TEXT_EXTENSIONS.includes(ext) || ext === '') return [text];
  throw new Error(`${file.name}: unsupported file type "${ext}" (want ${DATA_EXTENSIONS.join(', ')})`);
}

export interface TokenCorpus {
  /** Train tokens, then validation tokens. */
  tokens: Uint16Array | Uint32Array;
  trainTokens: number;
  documents: { train: number; val: number };
  /** UTF-8 bytes of the text each split stands for. */
  bytes: { train: number; val: number };
}

export interface SplitOptions {
  /** Share of tokens held out for validation (default 0.1). */
  valFraction?: number;
}

const utf8Length = (s: string) => new TextEncoder().encode(s).length;

/**
 * Encodes documents (each followed by the tokenizer's end-of-text token when it has one) and splits
 * them: the last documents, about `valFraction` of the tokens, validate. One document, or a split by
 * document that would hold out more than twice the asked share, is split by tokens as nanoGPT does
 * (the first floor(n·(1−f)) tokens train).
 */
export function tokenizeDocuments(docs: string[], tokenizer: Tokenizer, o: SplitOptions = {}): TokenCorpus {
  const f = o.valFraction ?? 0.1;
  if (!(f >= 0 && f < 1)) throw new Error(`valFraction must be in [0, 1), got ${f}`);
  if (docs.length === 0 || docs.every((d) => d.length === 0)) throw new Error('the dataset has no text');
  const parts: Int32Array[] = [];
  let total = 0;
  for (const d of docs) {
    const ids = tokenizer.encode(d);
    let withEos = ids;
    if (tokenizer.eosId !== null) {
      withEos = new Int32Array(ids.length + 1);
      withEos.set(ids);
      withEos[ids.length] = tokenizer.eosId;
    }
    parts.push(withEos);
    total += withEos.length;
  }
  const tokens = tokenizer.vocabSize <= 65536 ? new Uint16Array(total) : new Uint32Array(total);
  let at = 0;
  for (const p of parts) {
    tokens.set(p, at);
    at += p.length;
  }
  let valDocs = 0;
  let valTokens = 0;
  if (f > 0) {
    while (valDocs < docs.length - 1 && valTokens < f * total) valTokens += parts[docs.length - 1 - valDocs++].length;
  }
  if (docs.length > 1 && valTokens <= 2 * f * total && (f === 0 || valDocs > 0)) {
    const trainDocs = docs.length - valDocs;
    const bytesOf = (from: number, to: number) => docs.slice(from, to).reduce((s, d) => s + utf8Length(d), 0);
    return { tokens, trainTokens: total - valTokens, documents: { train: trainDocs, val: valDocs }, bytes: { train: bytesOf(0, trainDocs), val: bytesOf(trainDocs, docs.length) } };
  }
  const trainTokens = Math.floor(total * (1 - f));
  const valBytes = trainTokens < total ? utf8Length(tokenizer.decode(tokens.subarray(trainTokens))) : 0;
  const allBytes = docs.reduce((s, d) => s + utf8Length(d), 0);
  return { tokens, trainTokens, documents: { train: docs.length, val: 0 }, bytes: { train: allBytes - valBytes, val: valBytes } };
}

/** Bits per byte of a loss in nats per token over text of `tokens` tokens and `bytes` UTF-8 bytes. */
export function bitsPerByte(natsPerToken: number, tokens: number, bytes: number): number {
  if (!(tokens > 0 && bytes > 0)) throw new Error(`bits per byte needs tokens and bytes > 0, got ${tokens} tokens, ${bytes} bytes`);
  return (natsPerToken * tokens) / bytes / Math.LN2;
}

/** The validation split's bits per byte for a loss in nats per token. */
export function valBitsPerByte(corpus: TokenCorpus, natsPerToken: number): number {
  return bitsPerByte(natsPerToken, corpus.tokens.length - corpus.trainTokens, corpus.bytes.val);
}

const MAGIC = 'LABTOKS1';

/** The compact token file: "LABTOKS1", u32 header length, header JSON, zero padding to 4 bytes, the tokens (LE). */
export function writeTokenFile(c: TokenCorpus, meta: Record<string, unknown> = {}): Uint8Array {
  const width = c.tokens instanceof Uint16Array ? 2 : 4;
  const header = new TextEncoder().encode(JSON.stringify({ ...meta, width, count: c.tokens.length, trainTokens: c.trainTokens, documents: c.documents, bytes: c.bytes }));
  const start = Math.ceil((12 + header.length) / 4) * 4;
  const out = new Uint8Array(start + c.tokens.byteLength);
  out.set(new TextEncoder().encode(MAGIC), 0);
  new DataView(out.buffer).setUint32(8, header.length, true);
  out.set(header, 12);
  out.set(new Uint8Array(c.tokens.buffer, c.tokens.byteOffset, c.tokens.byteLength), start);
  return out;
}

export function readTokenFile(b: Uint8Array): { corpus: TokenCorpus; meta: Record<string, unknown> } {
  const fail = (why: string): never => {
    throw new Error(`token file: ${why}`);
  };
  if (b.length < 12 || new TextDecoder().decode(b.subarray(0, 8)) !== MAGIC) fail(`no ${MAGIC} signature`);
  const n = new DataView(b.buffer, b.byteOffset, b.byteLength).getUint32(8, true);
  if (12 + n > b.length) fail('truncated header');
  let h: Record<string, unknown>;
  try {
    h = JSON.parse(new TextDecoder().decode(b.subarray(12, 12 + n)));
  } catch {
    return fail('header is not JSON');
  }
  const { width, count, trainTokens, documents, bytes, ...meta } = h as { width: number; count: number; trainTokens: number; documents: TokenCorpus['documents']; bytes: TokenCorpus['bytes'] };
  const start = Math.ceil((12 + n) / 4) * 4;
  if ((width !== 2 && width !== 4) || !Number.isSafeInteger(count) || b.length !== start + count * width) fail(`size ${b.length} does not match ${count} tokens of ${width} bytes`);
  const data = b.slice(start).buffer as ArrayBuffer;
  const tokens = width === 2 ? new Uint16Array(data) : new Uint32Array(data);
  return { corpus: { tokens, trainTokens, documents, bytes }, meta };
}

/** The batches a trainer draws from a token corpus (its split kept). */
export function datasetOf(c: TokenCorpus, seed: number): TextDataset {
  return TextDataset.fromTokens(Int32Array.from(c.tokens), { seed, trainTokens: c.trainTokens });
}
