import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { TextDataset } from '../../src/engine/train/data/data';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { rankBatch, rankRows } from '../../src/parallel/rank';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 20_000);
const data = new TextDataset(text, CharTokenizer.fromText(text), 7);

describe('a rank\'s slice of the batch (rank.ts)', () => {
  it('world 1 is the whole single-process batch', () => {
    expect(rankRows(4, { rank: 0, world: 1 })).toEqual([0, 4]);
    expect(rankBatch(data, { batch: 4, seq: 16 }, 3, { rank: 0, world: 1 })).toEqual(data.batch(3, 4, 16));
  });

  it('rank r\'s micro-batch j is rows [(r·k + j)·B, +B)', () => {
    expect(rankRows(2, { rank: 1, world: 3, micro: 1, accumulate: 2 })).toEqual([6, 8]);
    expect(rankRows(5, { rank: 2, world: 3 })).toEqual([10, 15]);
  });

  it('odd worlds and batches: the slices tile the global batch of world·k·B rows exactly, in rank order', () => {
    // B is the local batch, so the global batch always divides by the world; a 3-rank group with B = 5 trains 15 rows.
    for (const [world, B, k] of [[3, 5, 1], [3, 5, 2], [7, 1, 3], [2, 3, 1]]) {
      const rows = [];
      for (let rank = 0; rank < world; rank++) for (let micro = 0; micro < k; micro++) rows.push(rankRows(B, { rank, world, micro, accumulate: k }));
      rows.forEach(([r0, r1], i) => expect([r0, r1]).toEqual([i * B, (i + 1) * B]));
      const parts = rows.map((_, i) => rankBatch(data, { batch: B, seq: 8 }, 2, { rank: Math.floor(i / k), world, micro: i % k, accumulate: k }));
      const joined = new Int32Array(parts.reduce((n, p) => n + p.length, 0));
      parts.reduce((at, p) => (joined.set(p, at), at + p.length), 0);
      expect(joined).toEqual(data.batch(2, world * k * B, 8));
    }
  });

  it('refuses a rank outside the world, a micro-batch past accumulate, and non-integers', () => {
    expect(() => rankRows(2, { rank: 2, world: 2 })).toThrow(/rank 2 is not below world 2/);
    expect(() => rankRows(2, { rank: 0, world: 0 })).toThrow(/world must be an integer ≥ 1/);
    expect(() => rankRows(2, { rank: 0, world: 1, micro: 2, accumulate: 2 })).toThrow(/micro-batch 2 is not below accumulate 2/);
    expect(() => rankRows(0, { rank: 0, world: 1 })).toThrow(/batch must be an integer ≥ 1/);
    expect(() => rankRows(2, { rank: 0.5, world: 2 })).toThrow(/rank must be an integer/);
  });
});
