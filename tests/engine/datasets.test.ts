import { readFileSync } from 'node:fs';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { describe, expect, it } from 'vitest';
import { trainByteBpe } from '../../src/engine/train/tokenizer/bpe-train';
import { TextDataset } from '../../src/engine/train/data/data';
import { bitsPerByte, datasetOf, decodeText, readDocuments, readTokenFile, tokenizeDocuments, valBitsPerByte, writeTokenFile, type SourceFile } from '../../src/engine/train/data/datasets';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';

const corpus = readFileSync(new URL('../../public/data/tinyshakespeare.txt', import.meta.url), 'utf8');
const file = (name: string, content: string | Uint8Array): SourceFile => ({ name, bytes: typeof content === 'string' ? new TextEncoder().encode(content) : content });

describe('reading documents', () => {
  it('.txt is one document; .jsonl one a line (a chosen field, or strings); .json an array', async () => {
    expect(await readDocuments(file('a.txt', '\ufeffhello\nworld'))).toEqual(['hello\nworld']);
    expect(await readDocuments(file('a.jsonl', '{"text":"one"}\n\n{"text":"two","id":3}\n"three"\n'))).toEqual(['one', 'two', 'three']);
    expect(await readDocuments(file('a.jsonl', '{"story":"x"}\n{"story":"y"}'), { field: 'story' })).toEqual(['x', 'y']);
    expect(await readDocuments(file('a.json', '[{"text":"p"},"q"]'))).toEqual(['p', 'q']);
    expect(await readDocuments(file('a.json', '{"rows":[{"text":"r"}],"n":1}'))).toEqual(['r']);
  });

  it('.parquet: the chosen column of every row', async () => {
    const pq = new Uint8Array(parquetWriteBuffer({ columnData: [
      { name: 'text', data: ['first doc', 'second ünï doc', 'third'], type: 'STRING' },
      { name: 'id', data: [1, 2, 3], type: 'INT32' },
    ] }));
    expect(await readDocuments(file('train-00000-of-00001.parquet', pq))).toEqual(['first doc', 'second ünï doc', 'third']);
    await expect(readDocuments(file('x.parquet', pq), { field: 'content' })).rejects.toThrow(/x\.parquet: cannot read column "content"|x\.parquet: row 0 has no string field "content"/);
    await expect(readDocuments(file('bad.parquet', 'PAR1 not really'))).rejects.toThrow(/bad\.parquet is not a Parquet file/);
  });

  it('binary files are refused, named: a PNG, NUL bytes, invalid UTF-8, parquet bytes under .txt', async () => {
    const png = new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]);
    await expect(readDocuments(file('picture.png', png))).rejects.toThrow(/^picture\.png: unsupported file type|picture\.png is a PNG image, not text/);
    await expect(readDocuments(file('picture.txt', png))).rejects.toThrow('picture.txt is a PNG image, not text');
    expect(() => decodeText(file('blob.txt', new Uint8Array([65, 66, 0, 67])))).toThrow('blob.txt is not text: it has a NUL byte at offset 2');
    expect(() => decodeText(file('latin1.txt', new Uint8Array([0x63, 0x61, 0x66, 0xe9])))).toThrow('latin1.txt is not text: it is not valid UTF-8');
    await expect(readDocuments(file('data.jsonl', new Uint8Array([0x7b, 0xff, 0x7d])))).rejects.toThrow(/data\.jsonl is not text/);
    await expect(readDocuments(file('a.jsonl', '{"text":1}'))).rejects.toThrow(/a\.jsonl: line 1 has no string field "text" \(fields: text/);
    await expect(readDocuments(file('a.jsonl', '{"text":"a"}\n{oops'))).rejects.toThrow(/a\.jsonl: line 2 is not JSON/);
    await expect(readDocuments(file('a.csv', 'x,y'))).rejects.toThrow(/unsupported file type "\.csv"/);
  });
});

describe('pre-tokenized corpus', () => {
  const char = CharTokenizer.fromText(corpus);

  it('one document with the char tokenizer splits exactly as TextDataset (nanoGPT 90/10)', () => {
    const c = tokenizeDocuments([corpus], char);
    expect(c.tokens).toBeInstanceOf(Uint16Array);
    expect(c.trainTokens).toBe(1003854);
    expect(c.bytes.val).toBe(111540); // ASCII: one byte a character
    const old = TextDataset.fromText(corpus, char, 1337);
    const ds = datasetOf(c, 1337);
    expect(Array.from(ds.batch(3, 4, 32))).toEqual(Array.from(old.batch(3, 4, 32)));
    expect(Array.from(ds.valBatches(1, 2, 16)[0])).toEqual(Array.from(old.valBatches(1, 2, 16)[0]));
  });

  it('several documents split by document, each followed by <|endoftext|>; bytes counted per split', () => {
    const bpe = trainByteBpe(corpus.slice(0, 50_000), { vocabSize: 400 });
    const docs = corpus.slice(0, 60_000).split('\n\n');
    const c = tokenizeDocuments(docs, bpe, { valFraction: 0.1 });
    expect(c.documents.train + c.documents.val).toBe(docs.length);
    expect(c.documents.val).toBeGreaterThan(1);
    const val = c.tokens.subarray(c.trainTokens);
    expect(val[val.length - 1]).toBe(bpe.eosId);
    expect(c.trainTokens > 0 && c.tokens[c.trainTokens - 1]).toBe(bpe.eosId); // the split is at a document boundary
    const valShare = val.length / c.tokens.length;
    expect(valShare).toBeGreaterThanOrEqual(0.1);
    expect(valShare).toBeLessThan(0.12);
    const valText = docs.slice(c.documents.train).join('');
    expect(c.bytes.val).toBe(new TextEncoder().encode(valText).length);
    expect(bpe.decode(val.filter((t) => t !== bpe.eosId))).toBe(valText);
    // Bits per byte: nats per token × tokens per byte / ln 2.
    expect(valBitsPerByte(c, 2)).toBeCloseTo((2 * val.length) / c.bytes.val / Math.LN2, 12);
    expect(bitsPerByte(Math.LN2, 10, 10)).toBe(1);
    expect(() => bitsPerByte(1, 0, 5)).toThrow(/tokens and bytes > 0/);
  });

  it('a char and a BPE corpus of the same text: bits per byte compare where nats per token do not', () => {
    const text = corpus.slice(0, 30_000);
    const bpe = trainByteBpe(text, { vocabSize: 320 });
    const a = tokenizeDocuments([text], CharTokenizer.fromText(text));
    const b = tokenizeDocuments([text], bpe);
    // A uniform model over the bytes costs 8 bits a byte however the text is cut into tokens.
    const natsA = Math.log(256);
    const natsB = (Math.log(256) * b.bytes.val) / (b.tokens.length - b.trainTokens);
    expect(valBitsPerByte(a, natsA)).toBeCloseTo(8, 10);
    expect(valBitsPerByte(b, natsB)).toBeCloseTo(8, 10);
  });

  it('uint32 tokens for vocabularies above 65,536; token file round trip; corrupt files refused', () => {
    const wide = { ...char, vocabSize: 70000, eosId: null, encode: (s: string) => char.encode(s), decode: (ids: ArrayLike<number>) => char.decode(ids) } as unknown as CharTokenizer;
    const c32 = tokenizeDocuments(['abc abc', 'def'], wide);
    expect(c32.tokens).toBeInstanceOf(Uint32Array);
    for (const c of [c32, tokenizeDocuments([corpus.slice(0, 5000), 'x', 'y'], char)]) {
      const f = writeTokenFile(c, { tokenizer: 'sha' });
      const back = readTokenFile(f);
      expect(back.meta).toEqual({ tokenizer: 'sha' });
      expect(back.corpus.tokens.constructor).toBe(c.tokens.constructor);
      expect(Array.from(back.corpus.tokens)).toEqual(Array.from(c.tokens));
      expect({ ...back.corpus, tokens: null }).toEqual({ ...c, tokens: null });
      expect(f.length - c.tokens.byteLength).toBeLessThan(200);
      expect(() => readTokenFile(f.subarray(0, f.length - 1))).toThrow(/token file: size/);
    }
    expect(() => readTokenFile(new Uint8Array(20))).toThrow(/no LABTOKS1 signature/);
    expect(() => tokenizeDocuments([], char)).toThrow(/no text/);
    expect(() => tokenizeDocuments(['a'], char, { valFraction: 1 })).toThrow(/valFraction/);
  });
});
