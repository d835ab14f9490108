import { describe, expect, it } from 'vitest';
import { tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { ArrayTokenStore, StreamDataset } from '../../src/engine/train/data/token-stream';
import { TextDataset } from '../../src/engine/train/data/data';
import { CHUNK_BYTES, inspectFile, prepareData, type PreparedMeta, type TokenCache } from '../../src/worker/prepare';
import { readFileSync } from 'node:fs';
import { parquetWriteBuffer } from 'hyparquet-writer';

/** The OPFS cache's contract in memory: tokens per split, meta written last; `room`: tokens it takes before storage runs out. */
class MemoryCache implements TokenCache {
  metas = new Map<string, PreparedMeta>();
  tokens = new Map<string, { train: number[]; val: number[] }>();
  creates = 0;
  constructor(private readonly room = Infinity, private readonly freeBytes: number | null = null) {}
  async meta(key: string) { return this.metas.get(key) ?? null; }
  async free() { return this.freeBytes; }
  async create(key: string) {
    this.creates++;
    const t = { train: [] as number[], val: [] as number[] };
    this.tokens.set(key, t);
    const sink = (to: number[]) => ({
      write: (a: ArrayLike<number>) => {
        if (t.train.length + t.val.length + a.length > this.room) throw new DOMException('would exceed its storage quota', 'QuotaExceededError');
        for (let i = 0; i < a.length; i++) to.push(a[i]);
      },
    });
    return {
      sinks: { train: sink(t.train), val: sink(t.val) },
      commit: async (m: PreparedMeta) => void this.metas.set(key, m),
      discard: async () => void this.tokens.delete(key),
    };
  }
}

const file = (name: string, body: string | Uint8Array) => new File([body as BlobPart], name);
const shakespeare = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 20_000);

describe('prepareData', () => {
  it('the last progress before the cache is written says so (tokenizing reaches 100% with the last read)', async () => {
    const seen: string[] = [];
    const cache = new MemoryCache();
    let committedAfter = -1;
    const create = cache.create.bind(cache);
    cache.create = async (key: string) => {
      const w = await create(key);
      return { ...w, commit: async (m: PreparedMeta) => { committedAfter = seen.length; await w.commit(m); } };
    };
    await prepareData([file('s.txt', shakespeare)], { tokenizer: { kind: 'char' } }, cache, (phase, done, total) => seen.push(`${phase} ${done}/${total}`));
    const n = shakespeare.length;
    expect(seen.slice(-2)).toEqual([`tokenizing ${n}/${n}`, `saving the tokens ${n}/${n}`]);
    expect(committedAfter).toBe(seen.length);
  });

  it('char: the characters of the text, split by bytes (last tenth validates), cached by content', async () => {
    const cache = new MemoryCache();
    const f = file('a.txt', shakespeare);
    const p = await prepareData([f], { tokenizer: { kind: 'char' } }, cache);
    expect(p.cached).toBe(false);
    expect(p.tokenizer.kind).toBe('char');
    const tok = tokenizerFromJSON(cache.metas.get(p.key)!.tokenizerJSON);
    expect(p.tokenizer.vocabSize).toBe(new Set(shakespeare).size);
    const t = cache.tokens.get(p.key)!;
    expect(tok.decode(t.train) + tok.decode(t.val)).toBe(shakespeare);
    expect(p.stats.bytes.val).toBe(20_000 - Math.floor(20_000 * 0.9));
    expect(p.stats.tokens).toEqual({ train: t.train.length, val: t.val.length });
    const again = await prepareData([file('renamed.txt', shakespeare)], { tokenizer: { kind: 'char' } }, cache);
    expect(again).toMatchObject({ cached: true, key: p.key });
    expect(cache.creates).toBe(1);
    const other = await prepareData([f], { tokenizer: { kind: 'bpe', vocabSize: 300 } }, cache);
    expect(other.key).not.toBe(p.key);
    expect(other.tokenizer).toMatchObject({ kind: 'bpe', vocabSize: 300 });
  });

  it('a text larger than a chunk is cut at line ends: the same tokens as encoding it whole', async () => {
    const big = (shakespeare + '\n').repeat(Math.ceil((CHUNK_BYTES * 1.5) / shakespeare.length));
    const cache = new MemoryCache();
    const p = await prepareData([file('big.txt', big)], { tokenizer: { kind: 'bpe', vocabSize: 300 } }, cache);
    const tok = tokenizerFromJSON(cache.metas.get(p.key)!.tokenizerJSON);
    const t = cache.tokens.get(p.key)!;
    expect(tok.decode([...t.train, ...t.val])).toBe(big + '<|endoftext|>');
  });

  it('jsonl: the chosen field, every tenth document validates, its fields offered', async () => {
    const lines = Array.from({ length: 25 }, (_, i) => JSON.stringify({ id: i, body: `document number ${i}.`, n: 3 }));
    const f = file('d.jsonl', lines.join('\n') + '\n');
    expect((await inspectFile(f)).fields).toEqual(['body']);
    await expect(prepareData([f], { tokenizer: { kind: 'char' } }, new MemoryCache())).rejects.toThrow(/d\.jsonl: line 1 has no string field "text" \(fields: id, body, n/);
    const cache = new MemoryCache();
    const p = await prepareData([f], { field: 'body', tokenizer: { kind: 'char' } }, cache);
    expect(p.stats.documents).toEqual({ train: 23, val: 2 });
    const tok = tokenizerFromJSON(cache.metas.get(p.key)!.tokenizerJSON);
    expect(tok.decode(cache.tokens.get(p.key)!.val)).toBe('document number 9.document number 19.');
  });

  it('parquet and several files: the columns offered, every file split by its own documents', async () => {
    const body = Array.from({ length: 12 }, (_, i) => `row ${i} of the table.`);
    const pq = new Uint8Array(parquetWriteBuffer({ columnData: [{ name: 'content', data: body, type: 'STRING' }, { name: 'n', data: body.map((_, i) => i), type: 'INT32' }] }));
    const f = file('train-00000-of-00001.parquet', pq);
    expect((await inspectFile(f)).fields).toEqual(['content', 'n']);
    const cache = new MemoryCache();
    const p = await prepareData([f, file('b.txt', shakespeare)], { field: 'content', tokenizer: { kind: 'char' } }, cache);
    expect(p.files.map((x) => x.name)).toEqual(['train-00000-of-00001.parquet', 'b.txt']);
    expect(p.stats.documents).toEqual({ train: 11, val: 2 });
    const tok = tokenizerFromJSON(cache.metas.get(p.key)!.tokenizerJSON);
    expect(tok.decode(cache.tokens.get(p.key)!.val)).toBe('row 9 of the table.' + shakespeare.slice(Math.floor(shakespeare.length * 0.9)));
  });

  it('storage: a character corpus that cannot fit is refused before anything is written; one that runs out mid-way keeps nothing and says so', async () => {
    const f = file('a.txt', shakespeare);
    const tight = new MemoryCache(Infinity, 1000);
    await expect(prepareData([f], { tokenizer: { kind: 'char' } }, tight)).rejects.toThrow(/needs up to 0 MiB of this browser's storage and 0 MiB is free: free some of this site's storage/);
    expect(tight.creates).toBe(0);
    const full = new MemoryCache(5000);
    await expect(prepareData([f], { tokenizer: { kind: 'bpe', vocabSize: 300 } }, full)).rejects.toThrow(/storage for the page ran out after .* \(nothing was kept\)/);
    expect(full.creates).toBe(1);
    expect(full.tokens.size).toBe(0); // discarded
    expect(full.metas.size).toBe(0);
  });

  it('a binary file is refused with its name', async () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
    await expect(inspectFile(file('picture.png', png))).rejects.toThrow(/picture\.png: unsupported file type/);
    await expect(inspectFile(file('picture.txt', png))).rejects.toThrow(/picture\.txt is a PNG image, not text/);
    await expect(inspectFile(file('latin1.txt', new Uint8Array([0x63, 0x61, 0x66, 0xe9, 0x20, 0x61])))).rejects.toThrow(/latin1\.txt is not text: it is not valid UTF-8/);
    const cache = new MemoryCache();
    await expect(prepareData([file('ok.txt', shakespeare), file('bad.txt', png)], { tokenizer: { kind: 'char' } }, cache)).rejects.toThrow(/bad\.txt/);
    expect(cache.creates).toBe(0);
  });
});

describe('StreamDataset', () => {
  it('draws the same batches as TextDataset over the same split', () => {
    const tokens = Int32Array.from({ length: 500 }, (_, i) => (i * 7) % 61);
    const mem = TextDataset.fromTokens(tokens, { seed: 5, trainTokens: 450 });
    const stream = new StreamDataset({ train: new ArrayTokenStore(Uint16Array.from(tokens.subarray(0, 450))), val: new ArrayTokenStore(Uint16Array.from(tokens.subarray(450))) }, 5);
    expect(stream.batch(3, 4, 16)).toEqual(mem.batch(3, 4, 16));
    expect(stream.valBatches(2, 2, 8)).toEqual(mem.valBatches(2, 2, 8));
    expect(() => stream.batch(0, 1, 60, 'val')).toThrow(/val split has 50 tokens/);
  });
});
