import { readFileSync, writeFileSync } from 'node:fs';
import { tokenizerFromJSON } from '/work/main/src/engine/train/hf-tokenizer';
const dir = process.argv[2];
const tok = tokenizerFromJSON(JSON.parse(readFileSync(`${dir}/tokenizer.json`, 'utf8')));
const samples = ['First Citizen:\nBefore we proceed any further, hear me speak.', 'naïve café — 東京 🚀', '  two  spaces\n\n\ttab', readFileSync('/work/main/public/data/tinyshakespeare.txt', 'utf8').slice(5000, 9000)];
writeFileSync(`${dir}/our_ids.json`, JSON.stringify(samples.map((s) => ({ text: s, ids: Array.from(tok.encode(s)) }))));
console.log('ok', tok.vocabSize);
