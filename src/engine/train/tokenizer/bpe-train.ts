/**
 * Byte-level BPE training, as the Hugging Face BpeTrainer does it: count the corpus's pre-tokens
 * (GPT-2 pattern) once, start from the 256 bytes, and repeatedly merge the most frequent adjacent
 * pair (ties: the smaller pair of ids). Pair counts are kept incrementally: a merge touches only the
 * words that contain its pair (an index from pair to words), and a max-heap with lazy updates picks
 * the next pair (a popped entry whose count went stale is pushed back with its current count).
 * The vocabulary is bytes 0..255 as ids 0..255, then the merges, then <|endoftext|> as the last id.
 */
import { BYTE_TO_CHAR, ByteBpeTokenizer, EOS_TOKEN, GPT2_PATTERN } from './byte-bpe';

const PAIR = 1 << 21;

export interface BpeTrainOptions {
  /** Total vocabulary: 256 bytes + merges + 1 end-of-text token (so at least 257). */
  vocabSize: number;
  /** Called now and then with tokens made so far and tokens wanted (beyond the 256 bytes). */
  onProgress?: (done: number, total: number) => void;
}

/** Max-heap of (count, pair key): larger count first, then smaller key. */
class PairHeap {
  private counts: number[] = [];
  private keys: number[] = [];

  get size(): number {
    return this.counts.length;
  }

  private above(i: number, j: number): boolean {
    const c = this.counts;
    return c[i] > c[j] || (c[i] === c[j] && this.keys[i] < this.keys[j]);
  }

  private swap(i: number, j: number): void {
    const c = this.counts;
    const k = this.keys;
    [c[i], c[j]] = [c[j], c[i]];
    [k[i], k[j]] = [k[j], k[i]];
  }

  push(count: number, key: number): void {
    this.counts.push(count);
    this.keys.push(key);
    let i = this.counts.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.above(i, p)) break;
      this.swap(i, p);
      i = p;
    }
  }

  pop(): { count: number; key: number } {
    const top = { count: this.counts[0], key: this.keys[0] };
    const lastC = this.counts.pop()!;
    const lastK = this.keys.pop()!;
    const n = this.counts.length;
    if (n > 0) {
      this.counts[0] = lastC;
      this.keys[0] = lastK;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < n && this.above(l, m)) m = l;
        if (r < n && this.above(r, m)) m = r;
        if (m === i) break;
        this.swap(i, m);
        i = m;
      }
    }
    return top;
  }
}

/** Trains a byte-level BPE tokenizer on `text`; fewer merges than asked when the corpus runs out of pairs. */
export function trainByteBpe(text: string, o: BpeTrainOptions): ByteBpeTokenizer {
  if (!Number.isInteger(o.vocabSize) || o.vocabSize < 257 || o.vocabSize >= PAIR) {
    throw new Error(`BPE vocabulary size must be an integer in [257, ${PAIR}) (256 bytes + merges + end-of-text), got ${o.vocabSize}`);
  }
  if (text.length === 0) throw new Error('cannot train a BPE tokenizer on empty text');
  const wanted = o.vocabSize - 257;

  // Distinct pre-tokens with their counts; the end-of-text token never takes part in merges.
  const freq = new Map<string, number>();
  for (const part of text.split(EOS_TOKEN)) for (const m of part.matchAll(GPT2_PATTERN)) freq.set(m[0], (freq.get(m[0]) ?? 0) + 1);
  const utf8 = new TextEncoder();
  const words: Int32Array[] = [];
  const lens: number[] = [];
  const counts: number[] = [];
  for (const [w, c] of freq) {
    const b = utf8.encode(w);
    if (b.length < 2) continue;
    words.push(Int32Array.from(b));
    lens.push(b.length);
    counts.push(c);
  }

  const pairCount = new Map<number, number>();
  const where = new Map<number, number[]>();
  const addPairs = (wi: number, sign: number, onlyWith: number) => {
    const w = words[wi];
    const f = counts[wi] * sign;
    for (let i = 0; i + 1 < lens[wi]; i++) {
      const key = w[i] * PAIR + w[i + 1];
      pairCount.set(key, (pairCount.get(key) ?? 0) + f);
      if (sign > 0 && (onlyWith < 0 || w[i] === onlyWith || w[i + 1] === onlyWith)) {
        const list = where.get(key);
        if (list) list.push(wi);
        else where.set(key, [wi]);
      }
    }
  };
  for (let wi = 0; wi < words.length; wi++) addPairs(wi, 1, -1);
  const heap = new PairHeap();
  for (const [key, c] of pairCount) heap.push(c, key);

  const vocab = BYTE_TO_CHAR.slice();
  const idOf = new Map(vocab.map((t, i) => [t, i]));
  const merges: [string, string][] = [];
  const seen = new Int32Array(words.length).fill(-1);
  const every = Math.max(1, Math.floor(wanted / 100));
  while (vocab.length < o.vocabSize - 1 && heap.size > 0) {
    const top = heap.pop();
    const cur = pairCount.get(top.key) ?? 0;
    if (cur <= 0) continue;
    if (cur !== top.count) {
      heap.push(cur, top.key);
      continue;
    }
    const a = Math.floor(top.key / PAIR);
    const b = top.key % PAIR;
    const str = vocab[a] + vocab[b];
    // Two merges can make the same string ("ab"+"c", "a"+"bc"): they share its id, as in HF's trainer.
    let id = idOf.get(str);
    if (id === undefined) {
      id = vocab.length;
      vocab.push(str);
      idOf.set(str, id);
    }
    merges.push([vocab[a], vocab[b]]);
    const stamp = merges.length;
    const touched = new Set<number>();
    for (const wi of where.get(top.key) ?? []) {
      if (seen[wi] === stamp) continue;
      seen[wi] = stamp;
      const w = words[wi];
      let has = false;
      for (let i = 0; i + 1 < lens[wi]; i++) if (w[i] === a && w[i + 1] === b) has = true;
      if (!has) continue;
      addPairs(wi, -1, -1);
      let k = 0;
      for (let i = 0; i < lens[wi]; i++) {
        if (i + 1 < lens[wi] && w[i] === a && w[i + 1] === b) {
          w[k++] = id;
          i++;
        } else w[k++] = w[i];
      }
      lens[wi] = k;
      addPairs(wi, 1, id);
      for (let i = 0; i + 1 < k; i++) if (w[i] === id || w[i + 1] === id) touched.add(w[i] * PAIR + w[i + 1]);
    }
    where.delete(top.key);
    for (const key of touched) {
      const c = pairCount.get(key) ?? 0;
      if (c > 0) heap.push(c, key);
    }
    if ((vocab.length - 256) % every === 0) o.onProgress?.(vocab.length - 256, wanted);
  }
  o.onProgress?.(vocab.length - 256, wanted);
  const eos = vocab.length;
  vocab.push(EOS_TOKEN);
  return new ByteBpeTokenizer({ vocab, merges, specials: [{ id: eos, content: EOS_TOKEN }] });
}
