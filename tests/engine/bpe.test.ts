import { readFileSync } from 'node:fs';
import { Tokenizer as HfLib } from '@huggingface/tokenizers';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { trainByteBpe } from '../../src/engine/train/tokenizer/bpe-train';
import { ByteBpeTokenizer, byteBpeSpecOf, EOS_TOKEN } from '../../src/engine/train/tokenizer/byte-bpe';
import { HfTokenizer, tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { CharTokenizer, type HfTokenizerJSON } from '../../src/engine/train/tokenizer/tokenizer';

const corpus = readFileSync(new URL('../../public/data/tinyshakespeare.txt', import.meta.url), 'utf8');
const libOf = (j: HfTokenizerJSON) => new HfLib(JSON.parse(JSON.stringify(j)), {});
const libIds = (lib: HfLib, s: string) => lib.encode(s, { add_special_tokens: false }).ids;

const SAMPLES = [
  'First Citizen:\nBefore we proceed any further, hear me speak.',
  "I'll 'tis we're they've she'd you'll I'm it's",
  'naïve café Ünïcødé — “quotes” façade',
  'emoji 😀👍🏽 and flags 🇫🇷, CJK 漢字かなカナ, Hangul 한국어, Arabic مرحبا',
  'e\u0301 combining, zero\u200bwidth, nbsp\u00a0here, bom\ufeffmark',
  '   leading spaces\n\n\n\ttabs\t\t and trailing   ',
  'numbers 123 4567 3.14159 1,000,000 ٣٤٥',
  'crlf\r\nline\rcr',
  `doc one${EOS_TOKEN}doc two ${EOS_TOKEN}${EOS_TOKEN} end`,
  'lone surrogate \ud800 here',
  '',
  ' ',
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
];

describe('byte-level BPE trained in the lab', () => {
  const slice = corpus.slice(0, 200_000);
  const tok = trainByteBpe(slice, { vocabSize: 512 });
  const json = JSON.parse(JSON.stringify(tok.hfJSON())) as HfTokenizerJSON;
  const lib = libOf(json);

  it('has the asked vocabulary: 256 bytes, merges, <|endoftext|> last; unique token strings', () => {
    expect(tok.vocabSize).toBe(512);
    expect(tok.eosId).toBe(511);
    const vocab = json.model.vocab as Record<string, number>;
    expect(Object.keys(vocab).length).toBe(512);
    expect(new Set(Object.values(vocab)).size).toBe(512);
    expect(vocab[EOS_TOKEN]).toBe(511);
    expect(vocab['Ġ']).toBe(32); // the space byte, as GPT-2 writes it
    expect((json.model.merges as string[]).length).toBeGreaterThanOrEqual(255);
    expect(json.added_tokens).toEqual([expect.objectContaining({ id: 511, content: EOS_TOKEN, special: true })]);
  });

  it('@huggingface/tokenizers loads the written tokenizer.json and gives the same ids, and decodes the same', () => {
    for (const s of [...SAMPLES, corpus.slice(200_000, 260_000)]) {
      const ours = Array.from(tok.encode(s));
      expect(ours, JSON.stringify(s.slice(0, 40))).toEqual(libIds(lib, s));
      if (s.length) expect(tok.decode(ours)).toBe(lib.decode(ours, { clean_up_tokenization_spaces: false }));
      if (!s.includes('\ud800')) expect(tok.decode(ours)).toBe(s);
    }
    expect(tok.decode(tok.encode('lone \ud800'))).toBe('lone \ufffd'); // as TextEncoder writes it
  });

  it('property: random text (any code points, and text from the corpus alphabet) encodes as the library does', () => {
    fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (s) => {
      expect(Array.from(tok.encode(s))).toEqual(libIds(lib, s));
    }), { numRuns: 300 });
    const alpha = fc.constantFrom(...'the and ,.\'\n:;!?ABTHe'.split(''));
    fc.assert(fc.property(fc.array(alpha, { maxLength: 80 }), (cs) => {
      const s = cs.join('');
      expect(Array.from(tok.encode(s))).toEqual(libIds(lib, s));
    }), { numRuns: 300 });
  });

  it('loads back from its JSON as the fast encoder; compresses the corpus', () => {
    const back = tokenizerFromJSON(json);
    expect(back).toBeInstanceOf(ByteBpeTokenizer);
    expect(back.kind).toBe('bpe');
    const text = corpus.slice(300_000, 320_000);
    const ids = back.encode(text);
    expect(Array.from(ids)).toEqual(Array.from(tok.encode(text)));
    expect(ids.length).toBeLessThan(Buffer.byteLength(text) / 1.7); // 512 tokens: under 1.7 bytes a token would be no better than a few merges
    expect(tok.bytesOf(tok.encode(' the')[0])).toBe(4);
    expect(tok.bytesOf(511)).toBe(0);
  });

  it('reports progress and refuses bad settings', () => {
    const seen: number[] = [];
    trainByteBpe(slice.slice(0, 20_000), { vocabSize: 300, onProgress: (d, t) => { seen.push(d); expect(t).toBe(43); } });
    expect(seen.at(-1)).toBe(43);
    expect(seen.every((d, i) => i === 0 || d >= seen[i - 1])).toBe(true);
    expect(() => trainByteBpe(slice, { vocabSize: 256 })).toThrow(/vocabulary size must be an integer in \[257/);
    expect(() => trainByteBpe('', { vocabSize: 300 })).toThrow(/empty text/);
    // A corpus with few pairs gives a smaller vocabulary rather than made-up tokens.
    expect(trainByteBpe('abab', { vocabSize: 1000 }).vocabSize).toBe(256 + 2 + 1);
    expect(() => tok.decode([512])).toThrow(/token id 512 at position 0 is outside the vocabulary \[0, 512\)/);
  });

  it('TinyShakespeare, 4,096 tokens: trains in ≤ 20 s; encodes many times faster than the library, with its ids', () => {
    let t0 = performance.now();
    const big = trainByteBpe(corpus, { vocabSize: 4096 });
    const trainS = (performance.now() - t0) / 1000;
    expect(big.vocabSize).toBe(4096);
    expect(trainS).toBeLessThanOrEqual(20);
    const bytes = Buffer.byteLength(corpus);
    const fresh = tokenizerFromJSON(JSON.parse(JSON.stringify(big.hfJSON())));
    t0 = performance.now();
    const ids = fresh.encode(corpus);
    const ours = bytes / 1e6 / ((performance.now() - t0) / 1000);
    expect(fresh.decode(ids)).toBe(corpus);
    // Speed against the library on the same machine at the same time (absolute figures vary with load).
    const part = corpus.slice(500_000, 700_000);
    const lib = libOf(big.hfJSON());
    t0 = performance.now();
    const want = libIds(lib, part);
    const libS = performance.now() - t0;
    const again = tokenizerFromJSON(big.hfJSON());
    again.encode(part.slice(0, 20_000)); // warm, as the library's timing above includes its own set-up only once
    t0 = performance.now();
    const got = Array.from(again.encode(part));
    const oursS = performance.now() - t0;
    console.log(`BPE 4096 on TinyShakespeare: train ${trainS.toFixed(2)} s, encode ${ours.toFixed(1)} MB/s (library ${(Buffer.byteLength(part) / 1e3 / libS).toFixed(2)} MB/s), ${(bytes / ids.length).toFixed(3)} bytes/token`);
    expect(got).toEqual(want);
    // A wide margin: both timings share the machine with the rest of the suite.
    expect(libS / oursS).toBeGreaterThan(2);
  });
});

/** BPE training by recounting every pair before every merge: what the incremental trainer must equal. */
function naiveMerges(text: string, merges: number): [string, string][] {
  const words = new Map<string, number>();
  for (const m of text.matchAll(/'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu)) words.set(m[0], (words.get(m[0]) ?? 0) + 1);
  const seqs = [...words].map(([w, c]) => ({ ids: Array.from(new TextEncoder().encode(w)), c }));
  const vocab = trainByteBpe('ab', { vocabSize: 257 }).hfJSON().model.vocab as Record<string, number>;
  const str = Object.keys(vocab).sort((x, y) => vocab[x] - vocab[y]).slice(0, 256);
  const out: [string, string][] = [];
  for (let k = 0; k < merges; k++) {
    const counts = new Map<number, number>();
    for (const { ids, c } of seqs) for (let i = 0; i + 1 < ids.length; i++) counts.set(ids[i] * 2 ** 21 + ids[i + 1], (counts.get(ids[i] * 2 ** 21 + ids[i + 1]) ?? 0) + c);
    let best = -1;
    let bestC = 0;
    for (const [key, c] of counts) if (c > bestC || (c === bestC && key < best)) [best, bestC] = [key, c];
    if (best < 0) break;
    const a = Math.floor(best / 2 ** 21);
    const b = best % 2 ** 21;
    let id = str.indexOf(str[a] + str[b]);
    if (id < 0) id = str.push(str[a] + str[b]) - 1;
    out.push([str[a], str[b]]);
    for (const s of seqs) {
      const n: number[] = [];
      for (let i = 0; i < s.ids.length; i++) {
        if (i + 1 < s.ids.length && s.ids[i] === a && s.ids[i + 1] === b) {
          n.push(id);
          i++;
        } else n.push(s.ids[i]);
      }
      s.ids = n;
    }
  }
  return out;
}

describe('BPE training is exact', () => {
  it('the incremental trainer makes the merges a full recount before every merge makes', () => {
    for (const text of [corpus.slice(0, 8000), 'aaaa aaa aa a abab ababab babab aaaa bbbb abba' + ' aaaaaaaaaa'.repeat(5)]) {
      const tok = trainByteBpe(text, { vocabSize: 330 });
      const got = (tok.hfJSON().model.merges as string[]).map((m) => m.split(' '));
      expect(got).toEqual(naiveMerges(text, got.length));
      expect(naiveMerges(text, got.length + 1).length).toBe(tok.vocabSize === 330 ? got.length + 1 : got.length);
    }
  });
});

describe('character tokenizer as a tokenizer.json', () => {
  it('the library gives the char tokenizer\'s ids and text', () => {
    const tok = CharTokenizer.fromText(corpus);
    const lib = libOf(tok.hfJSON());
    const text = corpus.slice(0, 3000);
    expect(libIds(lib, text)).toEqual(Array.from(tok.encode(text)));
    expect(lib.decode(Array.from(tok.encode(text)), { clean_up_tokenization_spaces: false })).toBe(text);
    const emoji = CharTokenizer.fromText('a😀é b');
    expect(libIds(libOf(emoji.hfJSON()), 'b😀a é')).toEqual(Array.from(emoji.encode('b😀a é')));
    // The exported file loads back through the library (no lab-specific shape to detect).
    expect(tokenizerFromJSON(tok.hfJSON()).encode('First')).toEqual(tok.encode('First'));
    expect(tokenizerFromJSON(tok.toJSON())).toBeInstanceOf(CharTokenizer);
  });
});

/** A Llama-style (SentencePiece BPE) tokenizer.json: ▁ for spaces, byte fallback, <s> </s> <unk>. */
function llamaStyle(): HfTokenizerJSON {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 };
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b;
  const pieces = ['▁', 'h', 'e', 'l', 'o', 'w', 'r', 'd', '▁h', 'll', '▁he', '▁hell', '▁hello', '▁w', 'or', '▁wor', 'ld', '▁world'];
  pieces.forEach((p, i) => { vocab[p] = 259 + i; });
  const merges = ['▁ h', 'l l', '▁h e', '▁he ll', '▁hell o', '▁ w', 'o r', '▁w or', 'l d', '▁wor ld'];
  const special = (id: number, content: string) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true });
  return {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [special(0, '<unk>'), special(1, '<s>'), special(2, '</s>')],
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' }, { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    pre_tokenizer: null,
    post_processor: { type: 'TemplateProcessing', single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }], pair: [], special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } } },
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, ignore_merges: false, vocab, merges },
  };
}

describe('existing tokenizer.json files go through @huggingface/tokenizers', () => {
  it('Llama-style BPE with byte fallback: ids, decode, end-of-text from tokenizer_config.json', () => {
    const tok = tokenizerFromJSON(llamaStyle(), { eos_token: '</s>' });
    expect(tok).toBeInstanceOf(HfTokenizer);
    expect(tok.vocabSize).toBe(259 + 18);
    expect(tok.eosId).toBe(2);
    const v = llamaStyle().model.vocab as Record<string, number>;
    expect(Array.from(tok.encode('hello world'))).toEqual([v['▁hello'], v['▁world']]);
    // 'é' is not in the vocabulary: its two UTF-8 bytes come as byte tokens.
    expect(Array.from(tok.encode('hé'))).toEqual([v['▁h'], 3 + 0xc3, 3 + 0xa9]);
    expect(tok.decode(tok.encode('hello world hé'))).toBe('hello world hé');
    expect(tok.decode([])).toBe('');
    expect(() => tok.decode([999])).toThrow(/outside the vocabulary/);
  });

  it('a GPT-2-style file of another shape (prefix space) is not taken by the fast encoder, and still matches the library', () => {
    const j = JSON.parse(JSON.stringify(trainByteBpe(corpus.slice(0, 30_000), { vocabSize: 300 }).hfJSON())) as HfTokenizerJSON;
    (j.pre_tokenizer as { add_prefix_space: boolean }).add_prefix_space = true;
    expect(byteBpeSpecOf(j)).toBeNull();
    const tok = tokenizerFromJSON(j);
    expect(tok.kind).toBe('hf');
    expect(Array.from(tok.encode('hello there'))).toEqual(libIds(libOf(j), 'hello there'));
  });

  it('bad input gives a clear error', () => {
    expect(() => tokenizerFromJSON(null)).toThrow(/not a tokenizer/);
    expect(() => tokenizerFromJSON({ version: '1.0' })).toThrow(/neither the lab's char tokenizer nor a tokenizer.json/);
    expect(() => tokenizerFromJSON({ model: { type: 'Nope' } })).toThrow(/tokenizer\.json: /);
  });
});
