import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TextDataset } from '../../src/engine/train/data/data';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';

const corpus = readFileSync(new URL('../../public/data/tinyshakespeare.txt', import.meta.url), 'utf8');
const tok = CharTokenizer.fromText(corpus);

describe('TextDataset', () => {
  const ds = TextDataset.fromText(corpus, tok, { seed: 1337 });

  it('splits 90/10 like nanoGPT (int(n * 0.9))', () => {
    expect(ds.tokens.length).toBe(1115394);
    expect(ds.train.length).toBe(1003854); // nanoGPT: "train has 1,003,854 tokens"
    expect(ds.val.length).toBe(111540); //          "val has 111,540 tokens"
    expect(tok.decode(ds.val.subarray(0, 20))).toBe(corpus.slice(1003854, 1003874));
  });

  it('batch rows are contiguous windows of the split; targets are inputs shifted by one', () => {
    const B = 5;
    const T = 33;
    for (const split of ['train', 'val'] as const) {
      const b = ds.batch(7, B, T, split);
      expect(b.length).toBe(B * (T + 1));
      const data = split === 'train' ? ds.train : ds.val;
      const starts = ds.offsets(7, T, split, 0, B);
      for (let r = 0; r < B; r++) {
        expect(starts[r]).toBeGreaterThanOrEqual(0);
        expect(starts[r] + T + 1).toBeLessThanOrEqual(data.length);
        expect(Array.from(b.subarray(r * (T + 1), (r + 1) * (T + 1)))).toEqual(Array.from(data.subarray(starts[r], starts[r] + T + 1)));
      }
    }
  });

  it('is a pure function of (seed, split, step): replayable, different per step/split/seed', () => {
    const again = TextDataset.fromText(corpus, tok, { seed: 1337 });
    expect(Array.from(again.batch(123, 4, 16))).toEqual(Array.from(ds.batch(123, 4, 16)));
    expect(Array.from(ds.batch(3, 4, 16))).toEqual(Array.from(ds.batch(3, 4, 16, 'train')));
    expect(Array.from(ds.offsets(1, 16, 'train', 0, 4))).not.toEqual(Array.from(ds.offsets(2, 16, 'train', 0, 4)));
    expect(Array.from(ds.offsets(1, 16, 'train', 0, 4))).not.toEqual(Array.from(ds.offsets(1, 16, 'val', 0, 4)));
    const other = TextDataset.fromText(corpus, tok, { seed: 1338 });
    expect(Array.from(other.offsets(1, 16, 'train', 0, 4))).not.toEqual(Array.from(ds.offsets(1, 16, 'train', 0, 4)));
    // A smaller batch is a prefix of a larger one.
    expect(Array.from(ds.batch(9, 8, 16)).slice(0, 3 * 17)).toEqual(Array.from(ds.batch(9, 3, 16)));
  });

  it('shards partition the global batch: W peers with batch b see the single-process batch W*b', () => {
    const W = 3;
    const b = 2;
    const T = 11;
    for (const step of [0, 1, 50]) {
      const global = ds.batch(step, W * b, T);
      const parts = Array.from({ length: W }, (_, r) => Array.from(ds.shard(r, W).batch(step, b, T)));
      expect(parts.flat()).toEqual(Array.from(global));
    }
    const vGlobal = ds.valBatches(2, W * b, T);
    const vParts = Array.from({ length: W }, (_, r) => ds.shard(r, W).valBatches(2, b, T));
    for (let k = 0; k < 2; k++) expect(vParts.flatMap((p) => Array.from(p[k]))).toEqual(Array.from(vGlobal[k]));
    expect(() => ds.shard(3, 3)).toThrow(/rank 3 is not below worldSize 3/);
  });

  it('starts are spread over the whole split (uniform draw)', () => {
    const starts = ds.offsets(0, 64, 'train', 0, 4000);
    let lo = 0;
    for (const s of starts) if (s < ds.train.length / 2) lo++;
    expect(lo).toBeGreaterThan(1800);
    expect(lo).toBeLessThan(2200);
    expect(Math.max(...starts)).toBeLessThanOrEqual(ds.train.length - 65);
  });

  it('validation batches are fixed: the same whatever was drawn before', () => {
    const a = ds.valBatches(3, 2, 8);
    ds.batch(99, 4, 8);
    const b = ds.valBatches(3, 2, 8);
    expect(a.map((x) => Array.from(x))).toEqual(b.map((x) => Array.from(x)));
    expect(Array.from(a[1])).toEqual(Array.from(ds.batch(1, 2, 8, 'val')));
  });

  it('clear errors for too little data and bad arguments', () => {
    const tiny = TextDataset.fromText('abcdefghijklmnopqrst', CharTokenizer.fromText('abcdefghijklmnopqrst'), { seed: 0 });
    expect(tiny.train.length).toBe(18);
    expect(tiny.val.length).toBe(2);
    expect(tiny.batch(0, 1, 17).length).toBe(18); // exactly T+1 tokens: the only window
    expect(Array.from(tiny.batch(5, 2, 17))).toEqual([...Array(18).keys(), ...Array(18).keys()]);
    expect(() => tiny.batch(0, 1, 18)).toThrow(/train split has 18 tokens, but a row of T=18 needs at least T\+1 = 19/);
    expect(() => tiny.valBatches(1, 1, 2)).toThrow(/val split has 2 tokens/);
    expect(() => TextDataset.fromText('', tok, { seed: 0 })).toThrow(/empty/);
    expect(() => TextDataset.fromTokens(new Int32Array(0), 0)).toThrow(/no tokens/);
    expect(Array.from(new TextDataset('abcab', CharTokenizer.fromText('abc'), 3).tokens)).toEqual([0, 1, 2, 0, 1]);
    expect(() => TextDataset.fromTokens(new Int32Array(4), -1)).toThrow(/seed must be/);
    expect(() => ds.batch(-1, 1, 8)).toThrow(/step must be an integer >= 0/);
    expect(() => ds.batch(0, 0, 8)).toThrow(/B must be/);
    expect(() => ds.batch(0, 1, 8, 'test' as never)).toThrow(/unknown split "test"/);
  });
});
