/**
 * `npm run train`'s contract: bad input is one `error:` line, exit 2, nothing written and the GPU
 * never started; a run stopped by Ctrl-C and resumed equals an uninterrupted one step for step.
 */
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readLatestCheckpoint, readVerified } from '../../src/cli/checkpoint-store';
import { countParams, PRESETS } from '../../src/engine/model/config';
import { bundleForTests, ROOT } from '../helpers/bundle';

const bundled = bundleForTests('src/cli/train.ts');
let dir: string;
const env = () => ({ ...process.env, XDG_RUNTIME_DIR: path.join(dir, 'xdg') });

function train(...args: string[]) {
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 300_000, env: env() });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Exactly one error line (Dawn may print adapter warnings beside it, never a second error). */
function errorLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.startsWith('error:'));
  expect(lines, stderr).toHaveLength(1);
  return lines[0];
}

const listing = (d: string): string[] => fs.readdirSync(d, { recursive: true }).map(String).sort();
/** Every step's loss and every evaluation's, in order (the timings differ from run to run). */
const losses = (run: string) => fs.readFileSync(path.join(run, 'metrics.jsonl'), 'utf8').trim().split('\n')
  .map((l) => JSON.parse(l) as { step: number; loss?: number; val_loss?: number }).map((m) => [m.step, m.loss ?? `val ${m.val_loss}`]);

const f = (name: string) => path.join(dir, name);
const BINARY = path.join(ROOT, 'tests/fixtures/hf-llama/model/model-00001-of-00003.safetensors');

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'train-cli-'));
  fs.mkdirSync(f('xdg'));
  // No newline anywhere: sampling must start from a prompt in the vocabulary.
  fs.writeFileSync(f('text.txt'), 'the quick brown fox jumps over the lazy dog '.repeat(20).trim());
  fs.writeFileSync(f('short.txt'), 'too short');
  fs.writeFileSync(f('misspelt.json'), '{"hiden_size": 64}');
  fs.writeFileSync(f('unknown-key.json'), '{"hidden_size": 32, "sliding_window": 4}');
  fs.writeFileSync(f('heads.json'), '{"num_attention_heads": 3}');
  fs.writeFileSync(f('partial.json'), '{"hidden_size": 64, "architectures": ["LlamaForCausalLM"], "torch_dtype": "float32"}');
  fs.writeFileSync(f('broken.json'), '{"hidden_size": ');
  fs.writeFileSync(f('layer99.json'), JSON.stringify({ name: 'x', layers: { 99: { weights: { format: 'int8' } } } }));
  fs.writeFileSync(f('layr.json'), JSON.stringify({ name: 'x', layr: {} }));
  fs.writeFileSync(f('formt.json'), JSON.stringify({ name: 'x', layer: { weights: { formt: 'int8' } } }));
  fs.mkdirSync(f('used'));
  fs.writeFileSync(f('used/keep.txt'), 'mine');
  fs.writeFileSync(f('a-file'), '');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('train CLI: bad input', () => {
  // [what, args, the error line]; each case gets --out DIR/never-<i> unless it names its own.
  const cases: [string, string[], RegExp][] = [
    ['negative steps', ['--steps', '-1'], /--steps expects an integer >= 1, got '-1'/],
    ['negative steps (=)', ['--steps=-1'], /--steps expects an integer >= 1, got '-1'/],
    ['fractional steps', ['--steps', '1.5'], /--steps expects an integer >= 1, got '1.5'/],
    ['a word for a number', ['--lr', 'fast'], /--lr expects a number >= 0, got 'fast'/],
    ['zero batch', ['--batch', '0'], /--batch expects an integer >= 1/],
    ['a zero learning rate', ['--lr', '0'], /--lr \(optimizer.lr\): Too small: expected number to be >0/],
    ['a batch too large', ['--batch', '5000'], /--batch \(batch\): Too big/],
    ['min-lr above lr', ['--lr', '0.001', '--min-lr', '0.01'], /--min-lr \(min_lr\) 0.01 > lr 0.001/],
    ['a misspelt option', ['--stepz', '3'], /unknown option '--stepz' \(did you mean '--steps'\?\)/],
    ['a positional argument', ['micro'], /unexpected argument 'micro'/],
    ['a value for a switch', ['--cpu=yes'], /--cpu takes no value/],
    ['a missing value', ['--steps'], /--steps expects a value/],
    ['an unknown preset', ['--model', 'huge'], /--model expects one of micro, tiny, small, base, got 'huge'/],
    ['a binary --config', ['--config', BINARY], /--config .*model-00001-of-00003.safetensors is not a text file \(binary content\)/],
    ['a missing --config', ['--config', 'nope.json'], /--config nope.json: no such file/],
    ['broken JSON', ['--config', '@broken.json'], /--config .*broken.json is not valid JSON/],
    ['a misspelt config key', ['--config', '@misspelt.json'], /unknown key 'hiden_size' \(did you mean 'hidden_size'\?\)/],
    ['an unknown config key', ['--config', '@unknown-key.json'], /unknown key 'sliding_window'/],
    ['an inconsistent config', ['--config', '@heads.json'], /--config .*heads.json: .*not divisible by num_attention_heads 3/],
    ['an unknown scheme', ['--scheme', 'nope'], /--scheme expects a preset \(fp32, .*\) or a .json file, got 'nope'/],
    ['a scheme layer the model lacks', ['--scheme', '@layer99.json'], /layers\["99"\]: the model has 2 layer\(s\)/],
    ['a misspelt scheme key', ['--scheme', '@layr.json'], /unknown key 'layr' \(did you mean 'layer'\?\)/],
    ['a misspelt quantizer key', ['--scheme', '@formt.json'], /layer.weights: unknown key 'formt' \(did you mean 'format'\?\)/],
    ['a scheme the model cannot run', ['--scheme', 'taco'], /--scheme taco cannot split this model: TP degree 4/],
    ['the same under --plan', ['--plan', '--scheme', 'taco'], /--scheme taco cannot split this model/],
    ['a missing --data', ['--data', 'nope.txt'], /--data nope.txt: no such file/],
    ['a binary --data', ['--data', BINARY], /--data: .* is not text: it has a NUL byte/],
    ['a text too short', ['--data', '@short.txt'], /--data .*short.txt with --seq 32: .*split has \d+ tokens/],
    ['a non-empty --out', ['--out', '@used'], /--out .*used is not empty \(1 entries\); pass --resume .* or --overwrite/],
    ['an --out under a file', ['--out', '@a-file/run'], /--out.*a-file/],
    ['--overwrite without --out', ['--overwrite'], /--overwrite needs --out DIR/],
    ['--resume of no run', ['--resume', '@nothing'], /--resume .*nothing.*run.json: no such file/],
  ];
  it.each(cases.map((c, i) => [i, ...c] as const))('#%i %s: exit 2, one error line, nothing written', (i, _what, rawArgs, want) => {
    const args = rawArgs.map((a) => (a.startsWith('@') ? f(a.slice(1)) : a));
    const out = f(`never-${i}`);
    const before = listing(dir);
    const r = train(...args, ...(args.includes('--out') || args.includes('--resume') || args.includes('--overwrite') ? [] : ['--out', out]));
    expect(r.status, r.stderr).toBe(2);
    expect(errorLine(r.stderr)).toMatch(want);
    expect(r.stderr).not.toMatch(/adapter:|\n\s+at /); // before the GPU; no stack trace
    expect(listing(dir)).toEqual(before);
  });

  it('a partial --config overrides the preset (as --plan shows)', () => {
    const params = (...args: string[]) => {
      const r = train(...args, '--plan');
      expect(r.status, r.stderr).toBe(0);
      return (JSON.parse(r.stdout) as { params: number }).params;
    };
    // hidden_size 64 instead of micro's 32, everything else the preset's (TinyShakespeare's 65 symbols).
    expect(params()).toBe(countParams({ ...PRESETS.micro, vocab_size: 65 }));
    expect(params('--config', f('partial.json'))).toBe(countParams({ ...PRESETS.micro, vocab_size: 65, hidden_size: 64 }));
  });
});

describe('train CLI: interrupt and resume (SwiftShader)', () => {
  const ARGS = ['--steps', '20', '--eval-every', '10', '--eval-batches', '2', '--batch', '2', '--seq', '16', '--cpu'];
  const args = () => [...ARGS, '--data', f('text.txt')];

  it('an uninterrupted run samples from text without a newline and prints its summary', () => {
    const r = train(...args(), '--sample', '8', '--out', f('whole'));
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/^adapter: /m);
    const lines = r.stdout.trim().split('\n');
    expect(lines.length).toBe(2);
    expect(JSON.parse(lines[1])).toMatchObject({ steps: 20, final_val_loss: expect.any(Number) as number });
    expect(readVerified(f('whole')).step).toBe(20);
  }, 300_000);

  it('Ctrl-C checkpoints the last completed step; --resume then equals the uninterrupted run step for step', async () => {
    const run = f('cut');
    const child = spawn(process.execPath, [bundled(), ...args(), '--out', run, '--checkpoint-every', '1'], { cwd: ROOT, env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const metrics = path.join(run, 'metrics.jsonl');
    while (!(fs.existsSync(metrics) && fs.readFileSync(metrics, 'utf8').includes('"loss"'))) await new Promise((r) => setTimeout(r, 10));
    child.kill('SIGINT');
    expect(await exited, stderr).toBe(130);
    const stoppedAt = (JSON.parse(stdout.trim().split('\n').pop()!) as { stopped_at: number }).stopped_at;
    expect(stoppedAt).toBeGreaterThan(0);
    expect(stoppedAt).toBeLessThan(20);
    expect(stderr).toMatch(/continue with: npm run train -- --resume /);
    expect(readLatestCheckpoint(run)!.step).toBe(stoppedAt);

    // Refused before anything is touched: conflicting flags, a corrupt or truncated checkpoint.
    const ckDir = readLatestCheckpoint(run)!.dir;
    const copy = (name: string, spoil?: (ck: string) => void) => {
      const d = f(name);
      fs.cpSync(run, d, { recursive: true });
      spoil?.(path.join(d, 'checkpoints', path.basename(ckDir)));
      return d;
    };
    const refusals: [string, string[], RegExp][] = [
      [copy('conflict'), ['--lr', '0.5'], /--lr 0.5 conflicts with the run being resumed/],
      [copy('combined'), ['--scheme', 'w8'], /--scheme cannot be combined with --resume/],
      [copy('elsewhere'), ['--out', f('other')], /--out .*other conflicts with --resume/],
      [copy('corrupt', (ck) => {
        const p = path.join(ck, 'model.safetensors');
        const b = fs.readFileSync(p);
        b[b.length - 1] ^= 1;
        fs.writeFileSync(p, b);
      }), [], /model.safetensors does not match its checksum/],
      [copy('truncated', (ck) => fs.truncateSync(path.join(ck, 'optimizer.safetensors'), 100)), [], /optimizer.safetensors has 100 bytes, the manifest says \d+/],
      [copy('mixed', (ck) => fs.copyFileSync(path.join(f('whole'), 'lab.json'), path.join(ck, 'lab.json'))), [], /lab.json (has \d+ bytes|does not match)/],
    ];
    for (const [d, extra, want] of refusals) {
      const before = listing(path.dirname(d));
      const r = train('--resume', d, ...extra);
      expect(r.status, r.stderr).toBe(2);
      expect(errorLine(r.stderr)).toMatch(want);
      expect(listing(path.dirname(d))).toEqual(before);
    }

    const r = train('--resume', run);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(new RegExp(`resuming .* at step ${stoppedAt} of 20`));
    expect(losses(run)).toEqual(losses(f('whole')));
    expect(losses(run)).toHaveLength(22);
    for (const file of ['model.safetensors', 'optimizer.safetensors']) {
      expect(fs.readFileSync(path.join(run, file)).equals(fs.readFileSync(path.join(f('whole'), file))), file).toBe(true);
    }
  }, 600_000);

  it('an export cut by a kill is written again from the last checkpoint by --resume (no GPU)', () => {
    const run = f('whole');
    const model = fs.readFileSync(path.join(run, 'model.safetensors'));
    fs.rmSync(path.join(run, 'manifest.json'));
    fs.truncateSync(path.join(run, 'model.safetensors'), 1000);
    const r = train('--resume', run);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/adapter:/);
    expect(r.stderr).toMatch(/is complete \(20 of 20 steps\)/);
    expect(Buffer.from(readVerified(run).files['model.safetensors']).equals(model)).toBe(true);
  });

  it('run.json holds the run spec; one written before the spec existed still resumes (no GPU)', () => {
    const run = f('legacy');
    fs.cpSync(f('whole'), run, { recursive: true });
    const info = JSON.parse(fs.readFileSync(path.join(run, 'run.json'), 'utf8')) as Record<string, unknown>;
    expect(info.spec).toMatchObject({ preset: 'micro', batch: 2, seq: 16, cadence: { evalEvery: 10, evalBatches: 2, checkpointEvery: 100 }, strategy: { kind: 'single' } });
    delete info.spec;
    fs.writeFileSync(path.join(run, 'run.json'), JSON.stringify(info));
    const r = train('--resume', run);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/is complete \(20 of 20 steps\)/);
    expect(errorLine(train('--resume', run, '--eval-every', '5').stderr)).toMatch(/--eval-every 5 conflicts with the run being resumed/);
  });
});
