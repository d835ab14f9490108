/**
 * Token dataset with replayable batches.
 *
 * Split as nanoGPT's prepare.py: the first floor(0.9·n) tokens train, the rest validate.
 *
 * Batches (B rows, T positions; one row is T+1 tokens: inputs = row[0:T], targets = row[1:T+1]):
 * row r of batch `step` of `split` starts at the r-th draw of
 *     Rng(deriveSeed(seed, `${split}:${step}`)).int(len(split) - T)
 * i.e. uniformly in [0, len − T − 1] (torch.randint(len − T) in nanoGPT). So a batch is a pure
 * function of (seed, split, step, T): any step can be replayed without the ones before it (resume,
 * the PyTorch replay), and a batch of B rows is the first B rows of a batch of B' ≥ B rows.
 *
 * Data parallelism: peer `rank` of `worldSize`, asking for a local batch of b rows, gets rows
 * [rank·b, (rank+1)·b) of the global batch of b·worldSize rows. The peers' rows are disjoint and
 * together are exactly the single-process batch, so a run on W peers with local batch b sees the
 * same data as one process with batch W·b (and the mean of the peers' mean losses is its loss).
 * Each peer draws all b·W offsets (cheap) and copies only its own rows.
 *
 * Validation uses the fixed batches 'val' steps 0..count−1, independent of the training step, so
 * val losses from different points of a run (or different runs with the same seed) are comparable.
 */
import { deriveSeed, Rng } from '../../util/rng';
import type { Tokenizer } from '../tokenizer/tokenizer';

export type Split = 'train' | 'val';

export interface DatasetOptions {
  seed: number;
  /** Fraction held out for validation, at the end of the data (default 0.1, as nanoGPT). */
  valFraction?: number;
  /** Where validation starts instead (a document boundary of a TokenCorpus, datasets.ts). */
  trainTokens?: number;
}

/** What a trainer needs; a TextDataset and each of its shards provide it. */
export interface BatchSource {
  /** Int32Array [B, T+1], row-major. */
  batch(step: number, B: number, T: number, split?: Split): Int32Array;
  valBatches(count: number, B: number, T: number): Int32Array[];
}

function checkInt(name: string, v: number, min: number): void {
  if (!Number.isSafeInteger(v) || v < min) throw new Error(`${name} must be an integer >= ${min}, got ${v}`);
}

/**
 * Start offsets of rows [r0, r1) of batch `step` of a split of `len` tokens (the rule in the header);
 * shared by every dataset, so in-memory and streamed token files give the same batches.
 */
export function drawOffsets(seed: number, split: Split, step: number, T: number, len: number, r0: number, r1: number): Int32Array {
  if (len < T + 1) {
    throw new Error(`${split} split has ${len} tokens, but a row of T=${T} needs at least T+1 = ${T + 1} (use a longer text or a shorter sequence)`);
  }
  const rng = new Rng(deriveSeed(seed >>> 0, `${split}:${step}`));
  const out = new Int32Array(r1 - r0);
  for (let r = 0; r < r1; r++) {
    const start = rng.int(len - T);
    if (r >= r0) out[r - r0] = start;
  }
  return out;
}

export class TextDataset implements BatchSource {
  readonly tokens: Int32Array;
  readonly train: Int32Array;
  readonly val: Int32Array;
  readonly seed: number;

  /**
   * `new TextDataset(text, tokenizer, seed)`; or pre-encoded tokens with `TextDataset.fromTokens`.
   * `opts` is the seed, or {seed, valFraction}.
   */
  constructor(text: string | Int32Array, tokenizer: Pick<Tokenizer, 'encode'> | null, opts: number | DatasetOptions) {
    const o = typeof opts === 'number' ? { seed: opts } : opts;
    let tokens: Int32Array;
    if (typeof text === 'string') {
      if (text.length === 0) throw new Error('dataset text is empty');
      if (!tokenizer) throw new Error('a tokenizer is needed to build a dataset from text');
      tokens = tokenizer.encode(text);
    } else tokens = text;
    if (tokens.length === 0) throw new Error('dataset has no tokens (empty text?)');
    checkInt('seed', o.seed, 0);
    const f = o.valFraction ?? 0.1;
    if (!(f >= 0 && f < 1)) throw new Error(`valFraction must be in [0, 1), got ${f}`);
    this.tokens = tokens;
    // Math.floor(n * 0.9) is the same double arithmetic as Python's int(n * 0.9).
    const nTrain = o.trainTokens ?? Math.floor(tokens.length * (1 - f));
    if (!Number.isSafeInteger(nTrain) || nTrain < 0 || nTrain > tokens.length) throw new Error(`trainTokens ${nTrain} is outside [0, ${tokens.length}]`);
    this.train = tokens.subarray(0, nTrain);
    this.val = tokens.subarray(nTrain);
    this.seed = o.seed >>> 0;
  }

  static fromText(text: string, tokenizer: Pick<Tokenizer, 'encode'>, opts: number | DatasetOptions): TextDataset {
    return new TextDataset(text, tokenizer, opts);
  }

  static fromTokens(tokens: Int32Array, opts: number | DatasetOptions): TextDataset {
    return new TextDataset(tokens, null, opts);
  }

  private data(split: Split): Int32Array {
    if (split === 'train') return this.train;
    if (split === 'val') return this.val;
    throw new Error(`unknown split ${JSON.stringify(split)} (want "train" or "val")`);
  }

  /** Start offsets of rows [r0, r1) of the batch (pure function of seed, split, step, T). */
  offsets(step: number, T: number, split: Split, r0: number, r1: number): Int32Array {
    checkInt('step', step, 0);
    checkInt('T', T, 1);
    const len = this.data(split).length;
    return drawOffsets(this.seed, split, step, T, len, r0, r1);
  }

  /** Rows [r0, r1) of the batch as Int32Array [(r1−r0), T+1]. */
  rows(step: number, T: number, split: Split, r0: number, r1: number): Int32Array {
    const data = this.data(split);
    const starts = this.offsets(step, T, split, r0, r1);
    const out = new Int32Array(starts.length * (T + 1));
    starts.forEach((s, i) => out.set(data.subarray(s, s + T + 1), i * (T + 1)));
    return out;
  }

  batch(step: number, B: number, T: number, split: Split = 'train'): Int32Array {
    checkInt('B', B, 1);
    return this.rows(step, T, split, 0, B);
  }

  valBatches(count: number, B: number, T: number): Int32Array[] {
    checkInt('count', count, 0);
    return Array.from({ length: count }, (_, k) => this.batch(k, B, T, 'val'));
  }

  shard(rank: number, worldSize: number): BatchSource {
    checkInt('worldSize', worldSize, 1);
    checkInt('rank', rank, 0);
    if (rank >= worldSize) throw new Error(`rank ${rank} is not below worldSize ${worldSize}`);
    const batch = (step: number, B: number, T: number, split: Split = 'train') => {
      checkInt('B', B, 1);
      return this.rows(step, T, split, rank * B, (rank + 1) * B);
    };
    return {
      batch,
      valBatches: (count, B, T) => {
        checkInt('count', count, 0);
        return Array.from({ length: count }, (_, k) => batch(k, B, T, 'val'));
      },
    };
  }
}

/** The in-memory dataset behind a batch source (data parallelism fingerprints and shards it); streamed data is refused. */
export function inMemoryData(data: BatchSource): TextDataset {
  if (!(data instanceof TextDataset)) throw new Error('this needs the corpus in memory (a streamed token corpus cannot be sharded by rows here)');
  return data;
}
