import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';

const corpus = readFileSync(new URL('../../public/data/tinyshakespeare.txt', import.meta.url), 'utf8');

describe('CharTokenizer', () => {
  it('TinyShakespeare has the 65 symbols of nanoGPT shakespeare_char', () => {
    const tok = CharTokenizer.fromText(corpus);
    expect(tok.vocabSize).toBe(65);
    // nanoGPT prints: all the unique characters: \n !$&',-.3:;?ABC...XYZabc...xyz
    expect(tok.vocab.join('')).toBe("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
    const ids = tok.encode(corpus);
    expect(ids.length).toBe(1115394);
    expect(Array.from(ids.subarray(0, 8))).toEqual([18, 47, 56, 57, 58, 1, 15, 47]); // "First Ci"
    expect(tok.decode(ids)).toBe(corpus);
  });

  it('sorts by code point and handles characters outside the BMP', () => {
    const tok = CharTokenizer.fromText('b😀a\u00e9a');
    expect(tok.vocab).toEqual(['a', 'b', '\u00e9', '😀']);
    expect(Array.from(tok.encode('😀ab'))).toEqual([3, 0, 1]);
    expect(tok.decode([3, 2])).toBe('😀\u00e9');
  });

  it('unknown characters are listed in the error', () => {
    const tok = CharTokenizer.fromText('abc');
    expect(() => tok.encode('abxcyx')).toThrow(/2 character\(s\) not in the 3-symbol vocabulary: "x" \(U\+0078\) ×2, "y" \(U\+0079\) ×1/);
    expect(() => tok.decode([0, 3])).toThrow(/token id 3 at position 1 is outside the vocabulary \[0, 3\)/);
    expect(() => tok.decode([1.5])).toThrow(/token id 1.5/);
  });

  it('toJSON / fromJSON round trip and validation', () => {
    const tok = CharTokenizer.fromText(corpus.slice(0, 5000));
    const back = CharTokenizer.fromJSON(JSON.parse(JSON.stringify(tok)));
    expect(back.vocab).toEqual(tok.vocab);
    expect(Array.from(back.encode('First'))).toEqual(Array.from(tok.encode('First')));
    expect(() => CharTokenizer.fromJSON({ type: 'bpe', vocab: [] })).toThrow(/not a char tokenizer/);
    expect(() => CharTokenizer.fromJSON({ type: 'char', vocab: ['a', 'a'] })).toThrow(/twice/);
    expect(() => CharTokenizer.fromJSON({ type: 'char', vocab: ['ab'] })).toThrow(/not one character/);
    expect(() => CharTokenizer.fromText('')).toThrow(/empty/);
  });
});
