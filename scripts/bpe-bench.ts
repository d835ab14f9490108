/**
 * node scripts/run-node.mjs scripts/bpe-bench.ts [FILE.txt] [VOCAB]: byte-level BPE training time and
 * encoding speed (the lab's encoder and @huggingface/tokenizers on the same text), as one JSON line.
 */
import { readFileSync } from 'node:fs';
import { Tokenizer as HfLib } from '@huggingface/tokenizers';
import { trainByteBpe } from '../src/engine/train/tokenizer/bpe-train';
import { tokenizerFromJSON } from '../src/engine/train/tokenizer/hf-tokenizer';

const file = process.argv[2] ?? 'public/data/tinyshakespeare.txt';
const vocab = Number(process.argv[3] ?? 4096);
const text = readFileSync(file, 'utf8');
const bytes = Buffer.byteLength(text);
const secs = (t0: number) => (performance.now() - t0) / 1000;

let t0 = performance.now();
const tok = trainByteBpe(text, { vocabSize: vocab });
const trainS = secs(t0);
const fresh = tokenizerFromJSON(JSON.parse(JSON.stringify(tok.hfJSON())));
t0 = performance.now();
const ids = fresh.encode(text);
const encodeS = secs(t0);
const lib = new HfLib(JSON.parse(JSON.stringify(tok.hfJSON())), {});
t0 = performance.now();
const libIds = lib.encode(text, { add_special_tokens: false }).ids;
const libS = secs(t0);
const same = libIds.length === ids.length && libIds.every((id, i) => id === ids[i]);
console.log(JSON.stringify({
  file, bytes, vocab: tok.vocabSize, train_s: +trainS.toFixed(3), encode_MBps: +(bytes / 1e6 / encodeS).toFixed(2),
  library_MBps: +(bytes / 1e6 / libS).toFixed(2), bytes_per_token: +(bytes / ids.length).toFixed(3), ids_equal_library: same,
}));
