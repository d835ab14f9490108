/**
 * Token corpora larger than memory: text is tokenized piece by piece into two token sinks (train,
 * validation) and trained from token stores read a row at a time, so memory stays bounded by the
 * largest piece, not the corpus. The page keeps the stores in the browser's origin-private file
 * system; tests and small data use arrays.
 *
 * Split by document: every VAL_EVERY-th document of a file of records validates; a file that is one
 * document (a .txt) gives its last 1/VAL_EVERY of bytes to validation instead.
 */
import { type BatchSource, drawOffsets, type Split } from './data';
import type { Tokenizer } from '../tokenizer/tokenizer';

export const VAL_EVERY = 10;

/** Tokens readable at any offset (synchronously: batches are drawn between GPU steps). */
export interface TokenStore {
  readonly length: number;
  /** Tokens [at, at + out.length) into out. */
  read(at: number, out: Int32Array): void;
}

export class ArrayTokenStore implements TokenStore {
  constructor(private readonly tokens: ArrayLike<number> & { subarray(a: number, b: number): ArrayLike<number> }) {}
  get length(): number {
    return this.tokens.length;
  }
  read(at: number, out: Int32Array): void {
    out.set(this.tokens.subarray(at, at + out.length));
  }
}

/** Batches as TextDataset draws them (same offsets for the same seed and split lengths), read from stores. */
export class StreamDataset implements BatchSource {
  constructor(private readonly stores: Record<Split, TokenStore>, private readonly seed: number) {}

  batch(step: number, B: number, T: number, split: Split = 'train'): Int32Array {
    const store = this.stores[split];
    const starts = drawOffsets(this.seed, split, step, T, store.length, 0, B);
    const out = new Int32Array(B * (T + 1));
    starts.forEach((s, i) => store.read(s, out.subarray(i * (T + 1), (i + 1) * (T + 1))));
    return out;
  }

  valBatches(count: number, B: number, T: number): Int32Array[] {
    return Array.from({ length: count }, (_, k) => this.batch(k, B, T, 'val'));
  }
}

export type TokenArray = Uint16Array | Uint32Array;

export interface TokenSink {
  write(tokens: TokenArray): void | Promise<void>;
}

export interface CorpusStats {
  tokens: Record<Split, number>;
  /** UTF-8 bytes of the text of each split (bits per byte = nats × tokens / bytes / ln 2). */
  bytes: Record<Split, number>;
  documents: Record<Split, number>;
}

/** Bytes per token in the store: 2 while the vocabulary fits uint16. */
export const tokenWidth = (vocabSize: number): 2 | 4 => (vocabSize <= 65536 ? 2 : 4);

/**
 * Encodes text as it arrives. A document may come in several pieces (a large .txt, cut at line
 * ends so no word is split); its end-of-text token follows its last piece.
 */
export class CorpusWriter {
  readonly stats: CorpusStats = { tokens: { train: 0, val: 0 }, bytes: { train: 0, val: 0 }, documents: { train: 0, val: 0 } };
  private readonly encoder = new TextEncoder();

  constructor(private readonly tokenizer: Tokenizer, private readonly sinks: Record<Split, TokenSink>) {}

  async add(text: string, split: Split, endOfDocument: boolean): Promise<void> {
    const ids = text.length ? this.tokenizer.encode(text) : new Int32Array(0);
    const eos = endOfDocument && this.tokenizer.eosId !== null ? 1 : 0;
    const out = tokenWidth(this.tokenizer.vocabSize) === 2 ? new Uint16Array(ids.length + eos) : new Uint32Array(ids.length + eos);
    out.set(ids);
    if (eos) out[ids.length] = this.tokenizer.eosId!;
    this.stats.tokens[split] += out.length;
    this.stats.bytes[split] += this.encoder.encode(text).length;
    if (endOfDocument) this.stats.documents[split]++;
    if (out.length) await this.sinks[split].write(out);
  }
}
