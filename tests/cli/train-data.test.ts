import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parquetWriteBuffer } from 'hyparquet-writer';
import { beforeAll, describe, expect, it } from 'vitest';
import { trainByteBpe } from '../../src/engine/train/tokenizer/bpe-train';
import { tokenizerFromJSON } from '../../src/engine/train/tokenizer/hf-tokenizer';
import { bundleForTests, ROOT } from '../helpers/bundle';
import { hfConfig, hfFixtureFiles } from '../helpers/hf-fixture';

const corpus = readFileSync(path.join(ROOT, 'public/data/tinyshakespeare.txt'), 'utf8');
const bundled = bundleForTests('src/cli/train.ts');
let dir: string;

function train(...args: string[]) {
  const env = { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? path.join(tmpdir(), `xdg-${process.pid}`) };
  mkdirSync(env.XDG_RUNTIME_DIR, { recursive: true });
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 300_000, env });
  const err = r.stderr.split('\n').filter((l) => l.startsWith('error:'));
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, error: err.join('\n') };
}
const plan = (...args: string[]) => {
  const r = train(...args, '--plan');
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout);
};

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'train-data-'));
  const docs = corpus.slice(0, 40_000).split('\n\n');
  writeFileSync(path.join(dir, 'docs.jsonl'), docs.map((d) => JSON.stringify({ id: 1, story: d })).join('\n'));
  mkdirSync(path.join(dir, 'folder'));
  writeFileSync(path.join(dir, 'folder', 'a.txt'), 'plain text ✓');
  writeFileSync(path.join(dir, 'folder', 'b.jsonl'), '{"text":"zebra"}\n');
  writeFileSync(path.join(dir, 'folder', 'c.parquet'), new Uint8Array(parquetWriteBuffer({ columnData: [{ name: 'text', data: ['quixotic'], type: 'STRING' }] })));
  writeFileSync(path.join(dir, 'folder', 'notes.bin'), new Uint8Array([0, 1, 2])); // not a data extension: skipped in folders
  writeFileSync(path.join(dir, 'picture.png'), new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]));
  writeFileSync(path.join(dir, 'picture.txt'), new Uint8Array([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13]));
  writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(trainByteBpe(corpus.slice(0, 30_000), { vocabSize: 333 }).hfJSON()));
  mkdirSync(path.join(dir, 'hf'));
  for (const [n, c] of Object.entries(hfFixtureFiles(corpus.slice(0, 30_000)))) writeFileSync(path.join(dir, 'hf', n), c);
});

describe('train CLI: --tokenizer, --data formats, --init', () => {
  it('--tokenizer char (default), bpe:N, FILE.json set the vocabulary the memory plan uses', () => {
    const jsonl = path.join(dir, 'docs.jsonl');
    expect(plan('--data', jsonl, '--text-field', 'story')).toMatchObject({ tokenizer: 'char' });
    const bpe = plan('--data', jsonl, '--text-field', 'story', '--tokenizer', 'bpe:300');
    expect(bpe).toMatchObject({ tokenizer: 'bpe', vocab_size: 300 });
    expect(plan('--tokenizer', path.join(dir, 'tokenizer.json'))).toMatchObject({ tokenizer: 'bpe', vocab_size: 333 });
    const small = plan('--data', jsonl, '--text-field', 'story', '--tokenizer', 'bpe:260');
    expect(bpe.params - small.params).toBe(40 * 32); // tied micro: one embedding row of 32 per token
  });

  it('a folder of .txt, .jsonl and .parquet files is read whole (its characters make the vocabulary)', () => {
    const chars = new Set('plain text ✓zebraquixotic');
    expect(plan('--data', path.join(dir, 'folder'), '--seq', '4', '--eval-every', '0')).toMatchObject({ tokenizer: 'char', vocab_size: chars.size });
    expect(plan('--data', `${path.join(dir, 'folder', 'a.txt')},${path.join(dir, 'folder', 'b.jsonl')}`, '--seq', '4', '--eval-every', '0').vocab_size).toBe(new Set('plain text ✓zebra').size);
  });

  it('binary data, a missing field, bad tokenizer settings are refused with the file named', () => {
    expect(train('--data', path.join(dir, 'picture.png'), '--plan').error).toMatch(/picture\.png is a PNG image, not text/);
    const r = train('--data', `${path.join(dir, 'folder')},${path.join(dir, 'picture.txt')}`, '--plan');
    expect(r.status).toBe(2);
    expect(r.error).toBe(`error: --data: ${path.join(dir, 'picture.txt')} is a PNG image, not text`);
    expect(train('--data', path.join(dir, 'docs.jsonl'), '--plan').error).toMatch(/line 1 has no string field "text" \(fields: id, story/);
    expect(train('--tokenizer', 'bpe:12', '--plan').error).toMatch(/--tokenizer bpe:12: BPE vocabulary size must be/);
    expect(train('--tokenizer', 'word', '--plan').error).toMatch(/--tokenizer must be char, bpe:N or a tokenizer.json file/);
    expect(train('--init', path.join(dir, 'nope'), '--plan').error).toMatch(/--init .*nope: ENOENT/);
    expect(train('--init', path.join(dir, 'folder'), '--plan').error).toMatch(/--init .*folder: checkpoint has no config\.json/);
  });

  it('--init DIR takes a sharded bf16 HF checkpoint\'s config and tokenizer; a short run trains from it and exports a complete bundle', () => {
    const p = plan('--init', path.join(dir, 'hf'));
    expect(p).toMatchObject({ tokenizer: 'bpe', vocab_size: hfConfig.vocab_size });
    const out = path.join(dir, 'run');
    const r = train('--init', path.join(dir, 'hf'), '--data', path.join(dir, 'docs.jsonl'), '--text-field', 'story', '--steps', '2', '--eval-every', '2', '--eval-batches', '2', '--seq', '16', '--cpu', '--out', out);
    expect(r.status, r.stderr).toBe(0);
    const run = JSON.parse(readFileSync(path.join(out, 'run.json'), 'utf8'));
    expect(run.model).toMatchObject({ hidden_size: 32, num_key_value_heads: 2, vocab_size: 300 });
    expect(run.data.documents.val).toBeGreaterThan(0);
    const metrics = readFileSync(path.join(out, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l));
    const val = metrics.find((m) => m.val_loss !== undefined);
    expect(val.val_bpb).toBeCloseTo((val.val_loss * (run.data.tokens - run.data.train_tokens)) / run.data.bytes.val / Math.LN2, 9);
    for (const f of ['config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) expect(readFileSync(path.join(out, f)).length).toBeGreaterThan(0);
    const tok = tokenizerFromJSON(JSON.parse(readFileSync(path.join(out, 'tokenizer.json'), 'utf8')));
    const orig = tokenizerFromJSON(JSON.parse(readFileSync(path.join(dir, 'hf', 'tokenizer.json'), 'utf8')));
    expect(tok.encode('Citizens, hear me')).toEqual(orig.encode('Citizens, hear me'));
    expect(JSON.parse(readFileSync(path.join(out, 'generation_config.json'), 'utf8')).eos_token_id).toBe(299);
  });
});
