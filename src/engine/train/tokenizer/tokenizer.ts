/**
 * The tokenizer every run has (the trainer, datasets, checkpoints and memory plans see only this),
 * and the character tokenizer, as nanoGPT's shakespeare_char: the vocabulary is the sorted set of
 * characters of the corpus (65 symbols for TinyShakespeare), token id = index in that list.
 * "Character" means Unicode code point, sorted by code point, which is what Python's
 * sorted(set(text)) gives.
 */

export type TokenizerKind = 'char' | 'bpe' | 'hf';

export interface Tokenizer {
  /** char: this file; bpe: byte-level BPE trained in the lab (byte-bpe.ts); hf: any tokenizer.json through @huggingface/tokenizers. */
  readonly kind: TokenizerKind;
  readonly vocabSize: number;
  /** Appended after each document of a dataset (null: documents simply follow each other). */
  readonly eosId: number | null;
  encode(text: string): Int32Array;
  decode(ids: ArrayLike<number>): string;
  /** What lab.json keeps (tokenizerFromJSON reads it back): CharTokenizerJSON for char, the tokenizer.json object otherwise. */
  toJSON(): object;
  /** The Hugging Face tokenizer.json exported beside the model (loads in transformers and @huggingface/tokenizers). */
  hfJSON(): HfTokenizerJSON;
}

/** The parts of a Hugging Face tokenizer.json the lab writes or inspects (the format has more). */
export interface HfTokenizerJSON {
  version?: string;
  added_tokens?: { id: number; content: string; special?: boolean; [k: string]: unknown }[];
  normalizer?: unknown;
  pre_tokenizer?: unknown;
  post_processor?: unknown;
  decoder?: unknown;
  model: { type?: string; vocab?: unknown; merges?: unknown; [k: string]: unknown };
  [k: string]: unknown;
}

export interface CharTokenizerJSON {
  type: 'char';
  vocab: string[];
}

function showChar(c: string): string {
  return `${JSON.stringify(c)} (U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')})`;
}

export class CharTokenizer implements Tokenizer {
  readonly kind = 'char' as const;
  readonly eosId = null;
  readonly vocab: readonly string[];
  private readonly index: Map<number, number>;

  constructor(vocab: readonly string[]) {
    if (vocab.length === 0) throw new Error('tokenizer vocabulary is empty');
    const index = new Map<number, number>();
    vocab.forEach((c, i) => {
      if (typeof c !== 'string' || [...c].length !== 1) throw new Error(`tokenizer vocabulary entry ${i} is not one character: ${JSON.stringify(c)}`);
      const cp = c.codePointAt(0)!;
      if (index.has(cp)) throw new Error(`tokenizer vocabulary has ${showChar(c)} twice`);
      index.set(cp, i);
    });
    this.vocab = [...vocab];
    this.index = index;
  }

  static fromText(text: string): CharTokenizer {
    if (text.length === 0) throw new Error('cannot build a tokenizer from empty text');
    const cps = new Set<number>();
    for (const c of text) cps.add(c.codePointAt(0)!);
    return new CharTokenizer([...cps].sort((a, b) => a - b).map((cp) => String.fromCodePoint(cp)));
  }

  get vocabSize(): number {
    return this.vocab.length;
  }

  encode(text: string): Int32Array {
    const out = new Int32Array(text.length); // upper bound: code points <= UTF-16 units
    let n = 0;
    let unknown: Map<string, number> | null = null;
    for (const c of text) {
      const id = this.index.get(c.codePointAt(0)!);
      if (id === undefined) {
        unknown ??= new Map();
        unknown.set(c, (unknown.get(c) ?? 0) + 1);
      } else out[n++] = id;
    }
    if (unknown) {
      const list = [...unknown].slice(0, 20).map(([c, k]) => `${showChar(c)} ×${k}`);
      const more = unknown.size > 20 ? `, and ${unknown.size - 20} more` : '';
      throw new Error(`text has ${unknown.size} character(s) not in the ${this.vocabSize}-symbol vocabulary: ${list.join(', ')}${more}`);
    }
    return n === out.length ? out : out.slice(0, n);
  }

  decode(ids: ArrayLike<number>): string {
    let s = '';
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!Number.isInteger(id) || id < 0 || id >= this.vocab.length) {
        throw new Error(`token id ${id} at position ${i} is outside the vocabulary [0, ${this.vocab.length})`);
      }
      s += this.vocab[id];
    }
    return s;
  }

  toJSON(): CharTokenizerJSON {
    return { type: 'char', vocab: [...this.vocab] };
  }

  /**
   * The same ids as a HF tokenizer: a BPE model without merges and without a pre-tokenizer splits
   * text into code points and looks each up; the Fuse decoder joins tokens with nothing between.
   */
  hfJSON(): HfTokenizerJSON {
    return {
      version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null, pre_tokenizer: null, post_processor: null,
      decoder: { type: 'Fuse' },
      model: {
        type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false,
        byte_fallback: false, ignore_merges: false, vocab: Object.fromEntries(this.vocab.map((c, i) => [c, i])), merges: [],
      },
    };
  }

  static fromJSON(json: unknown): CharTokenizer {
    const j = json as Partial<CharTokenizerJSON> | null;
    if (typeof j !== 'object' || j === null || j.type !== 'char') throw new Error(`not a char tokenizer: ${JSON.stringify(json)?.slice(0, 80)}`);
    if (!Array.isArray(j.vocab)) throw new Error('char tokenizer JSON has no vocab array');
    return new CharTokenizer(j.vocab);
  }
}

/** The prompt samples start from: a newline where the vocabulary can say one, else nothing (the first token). */
export function newlinePrompt(t: Pick<Tokenizer, 'encode'>): string {
  try {
    return t.encode('\n').length > 0 ? '\n' : '';
  } catch {
    return '';
  }
}
