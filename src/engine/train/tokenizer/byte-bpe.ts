/**
 * Byte-level BPE as GPT-2 defines it and as the lab trains it (bpe-train.ts): text is split by the
 * GPT-2 pattern, each piece becomes its UTF-8 bytes, and merges are applied lowest rank first,
 * leftmost first. ByteBpeTokenizer is the encoder for tokenizer.json files of exactly this shape
 * (what the trainer writes); it exists for speed and gives the ids @huggingface/tokenizers gives
 * (tests/engine/bpe.test.ts compares them). Any other tokenizer.json goes through that library
 * (hf-tokenizer.ts).
 */
import type { HfTokenizerJSON, Tokenizer } from './tokenizer';

/** GPT-2's pre-tokenizer pattern, as @huggingface/tokenizers compiles it for ByteLevel. */
export const GPT2_PATTERN = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

/** GPT-2's bytes_to_unicode: each byte as a printable character (printable Latin-1 stays itself). */
export const BYTE_TO_CHAR: readonly string[] = (() => {
  const keep = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let n = 0;
  for (let b = 0; b < 256; b++) out[b] = String.fromCharCode(keep(b) ? b : 256 + n++);
  return out;
})();

export const EOS_TOKEN = '<|endoftext|>';

const PAIR = 1 << 21; // pair key = a * PAIR + b; ids stay below 2^21
const CACHE_LIMIT = 1 << 18;

export interface ByteBpeSpec {
  /** Token string (byte-level characters) of every id; specials included. */
  vocab: string[];
  /** Merges in rank order, as token-string pairs. */
  merges: [string, string][];
  /** Special (added) tokens: id and content. */
  specials: { id: number; content: string }[];
}

/** The tokenizer.json of a byte-level BPE with GPT-2's settings (loads in transformers and @huggingface/tokenizers). */
export function byteBpeJSON(spec: ByteBpeSpec): HfTokenizerJSON {
  const byteLevel = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: spec.specials.map((s) => ({ id: s.id, content: s.content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: byteLevel,
    post_processor: { ...byteLevel, trim_offsets: false },
    decoder: byteLevel,
    model: {
      type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: false,
      byte_fallback: false, ignore_merges: false,
      vocab: Object.fromEntries(spec.vocab.map((t, i) => [t, i])),
      merges: spec.merges.map(([a, b]) => `${a} ${b}`),
    },
  };
}

/**
 * The spec of a tokenizer.json that ByteBpeTokenizer encodes exactly as the library does, or null
 * (another shape: normalizers, prefix spaces, unknown tokens, dropout, byte fallback, ...).
 */
export function byteBpeSpecOf(j: HfTokenizerJSON): ByteBpeSpec | null {
  const pre = j.pre_tokenizer as Record<string, unknown> | null | undefined;
  const dec = j.decoder as Record<string, unknown> | null | undefined;
  const m = j.model;
  if (j.normalizer != null || pre?.type !== 'ByteLevel' || pre.add_prefix_space !== false || pre.use_regex === false) return null;
  if (dec?.type !== 'ByteLevel') return null;
  const post = j.post_processor as Record<string, unknown> | null | undefined;
  if (post != null && post.type !== 'ByteLevel') return null;
  if (m.type !== 'BPE' || m.dropout != null || m.unk_token != null || m.continuing_subword_prefix || m.end_of_word_suffix || m.byte_fallback || m.ignore_merges) return null;
  if (typeof m.vocab !== 'object' || m.vocab === null || !Array.isArray(m.merges)) return null;
  const vocab: string[] = [];
  for (const [t, id] of Object.entries(m.vocab as Record<string, unknown>)) {
    if (!Number.isInteger(id) || (id as number) < 0 || (id as number) >= PAIR || vocab[id as number] !== undefined) return null;
    vocab[id as number] = t;
  }
  const specials: { id: number; content: string }[] = [];
  for (const a of j.added_tokens ?? []) {
    if (!a.special || a.normalized || a.lstrip || a.rstrip || a.single_word) return null;
    if (vocab[a.id] !== undefined && vocab[a.id] !== a.content) return null;
    vocab[a.id] = a.content;
    specials.push({ id: a.id, content: a.content });
  }
  for (let i = 0; i < vocab.length; i++) if (vocab[i] === undefined) return null;
  const have = new Set(vocab);
  if (!BYTE_TO_CHAR.every((c) => have.has(c))) return null;
  const merges: [string, string][] = [];
  for (const x of m.merges as unknown[]) {
    const pair = Array.isArray(x) ? x : typeof x === 'string' ? x.split(' ') : null;
    if (!pair || pair.length !== 2 || typeof pair[0] !== 'string' || typeof pair[1] !== 'string') return null;
    merges.push([pair[0], pair[1]]);
  }
  return { vocab, merges, specials };
}

export class ByteBpeTokenizer implements Tokenizer {
  readonly kind = 'bpe' as const;
  readonly vocabSize: number;
  readonly eosId: number | null;
  private readonly json: HfTokenizerJSON;
  private readonly byteId = new Int32Array(256);
  /** pair key → rank · PAIR + merged id (one lookup gives both). */
  private readonly ranks = new Map<number, number>();
  private readonly tokenBytes: Uint8Array[];
  private readonly specials: { id: number; content: string }[];
  private readonly specialOf = new Map<number, string>();
  private cache = new Map<string, Int32Array>();
  private readonly utf8 = new TextEncoder();
  private scratch = new Uint8Array(1024);

  constructor(spec: ByteBpeSpec) {
    const idOf = new Map(spec.vocab.map((t, i) => [t, i]));
    const charByte = new Map(BYTE_TO_CHAR.map((c, b) => [c, b]));
    for (let b = 0; b < 256; b++) {
      const id = idOf.get(BYTE_TO_CHAR[b]);
      if (id === undefined) throw new Error(`byte-level BPE: byte ${b} (${JSON.stringify(BYTE_TO_CHAR[b])}) has no token`);
      this.byteId[b] = id;
    }
    spec.merges.forEach(([a, b], rank) => {
      const ia = idOf.get(a);
      const ib = idOf.get(b);
      const im = idOf.get(a + b);
      if (ia === undefined || ib === undefined || im === undefined) throw new Error(`byte-level BPE: merge ${rank} "${a} ${b}" uses a token not in the vocabulary`);
      const key = ia * PAIR + ib;
      if (!this.ranks.has(key)) this.ranks.set(key, rank * PAIR + im);
    });
    this.specials = spec.specials;
    for (const s of spec.specials) this.specialOf.set(s.id, s.content);
    this.tokenBytes = spec.vocab.map((t, id) => {
      if (this.specialOf.has(id)) return new Uint8Array(0);
      const bytes = [...t].map((c) => charByte.get(c));
      if (bytes.some((b) => b === undefined)) throw new Error(`byte-level BPE: token ${id} ${JSON.stringify(t)} is not made of byte-level characters`);
      return Uint8Array.from(bytes as number[]);
    });
    this.vocabSize = spec.vocab.length;
    const eos = spec.specials.find((s) => s.content === EOS_TOKEN);
    this.eosId = eos ? eos.id : null;
    this.json = byteBpeJSON(spec);
  }

  static fromJSON(j: HfTokenizerJSON): ByteBpeTokenizer {
    const spec = byteBpeSpecOf(j);
    if (!spec) throw new Error('tokenizer.json is not a plain GPT-2-style byte-level BPE');
    return new ByteBpeTokenizer(spec);
  }

  toJSON(): HfTokenizerJSON {
    return this.json;
  }

  hfJSON(): HfTokenizerJSON {
    return this.json;
  }

  /** UTF-8 bytes that token `id` stands for (0 for special tokens). */
  bytesOf(id: number): number {
    return this.tokenBytes[id]?.length ?? 0;
  }

  encode(text: string): Int32Array {
    let out = new Int32Array(Math.max(16, text.length >> 1));
    let n = 0;
    const push = (ids: ArrayLike<number>) => {
      if (n + ids.length > out.length) {
        const grown = new Int32Array(Math.max(out.length * 2, n + ids.length));
        grown.set(out.subarray(0, n));
        out = grown;
      }
      for (let i = 0; i < ids.length; i++) out[n++] = ids[i];
    };
    let start = 0;
    for (;;) {
      const hit = this.nextSpecial(text, start);
      const end = hit ? hit.at : text.length;
      if (end > start) {
        for (const m of text.slice(start, end).matchAll(GPT2_PATTERN)) push(this.piece(m[0]));
      }
      if (!hit) break;
      push([hit.id]);
      start = hit.at + hit.content.length;
    }
    return out.slice(0, n);
  }

  /** Leftmost special token at or after `from` (the longest one there), as the library splits added tokens. */
  private nextSpecial(text: string, from: number): { at: number; id: number; content: string } | null {
    let best: { at: number; id: number; content: string } | null = null;
    for (const s of this.specials) {
      const at = text.indexOf(s.content, from);
      if (at >= 0 && (!best || at < best.at || (at === best.at && s.content.length > best.content.length))) best = { at, ...s };
    }
    return best;
  }

  /** The ids of one pre-token: its bytes, merged lowest rank first (all occurrences of that pair, left to right). */
  private piece(s: string): Int32Array {
    const hit = this.cache.get(s);
    if (hit) return hit;
    if (this.scratch.length < s.length * 3) this.scratch = new Uint8Array(s.length * 3);
    const len = this.utf8.encodeInto(s, this.scratch).written;
    const w = new Int32Array(len);
    for (let i = 0; i < len; i++) w[i] = this.byteId[this.scratch[i]];
    let L = len;
    while (L > 1) {
      let best = Infinity;
      let bestKey = -1;
      for (let i = 0; i + 1 < L; i++) {
        const key = w[i] * PAIR + w[i + 1];
        const r = this.ranks.get(key);
        if (r !== undefined && r < best) {
          best = r;
          bestKey = key;
        }
      }
      if (bestKey < 0) break;
      const merged = best % PAIR;
      let k = 0;
      for (let i = 0; i < L; i++) {
        if (i + 1 < L && w[i] * PAIR + w[i + 1] === bestKey) {
          w[k++] = merged;
          i++;
        } else w[k++] = w[i];
      }
      L = k;
    }
    const ids = w.slice(0, L);
    if (this.cache.size >= CACHE_LIMIT) this.cache = new Map();
    this.cache.set(s, ids);
    return ids;
  }

  decode(ids: ArrayLike<number>): string {
    const dec = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });
    let s = '';
    let run: number[] = [];
    const flush = () => {
      if (!run.length) return;
      let total = 0;
      for (const id of run) total += this.tokenBytes[id].length;
      const bytes = new Uint8Array(total);
      let o = 0;
      for (const id of run) {
        bytes.set(this.tokenBytes[id], o);
        o += this.tokenBytes[id].length;
      }
      s += dec.decode(bytes);
      run = [];
    };
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) throw new Error(`token id ${id} at position ${i} is outside the vocabulary [0, ${this.vocabSize})`);
      const sp = this.specialOf.get(id);
      if (sp === undefined) run.push(id);
      else {
        flush();
        s += sp;
      }
    }
    flush();
    return s;
  }
}
