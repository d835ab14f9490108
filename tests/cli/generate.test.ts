/**
 * `npm run generate`'s contract: bad input is one `error:` line (exit 2) before the GPU starts; a
 * trained run's checkpoint and an imported Hugging Face directory generate, the same text for a seed.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';

const generate = bundleForTests('src/cli/generate.ts');
const trainCli = bundleForTests('src/cli/train.ts');
let dir: string;
const f = (name: string) => path.join(dir, name);

function run(bundle: string, ...args: string[]) {
  const r = spawnSync(process.execPath, [bundle, ...args], { cwd: ROOT, encoding: 'utf8', timeout: 300_000, env: { ...process.env, XDG_RUNTIME_DIR: f('xdg') } });
  const errors = r.stderr.split('\n').filter((l) => l.startsWith('error:'));
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, error: errors.join('\n') };
}
const gen = (...args: string[]) => run(generate(), ...args);

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'generate-cli-'));
  fs.mkdirSync(f('xdg'));
  fs.mkdirSync(f('hf'));
  for (const sub of ['model', 'tokenizer']) {
    const src = path.join(ROOT, 'tests/fixtures/hf-llama', sub);
    for (const n of fs.readdirSync(src)) if (n !== 'logits.json' && n !== 'ids.json') fs.copyFileSync(path.join(src, n), path.join(f('hf'), n));
  }
  fs.writeFileSync(f('a-file'), 'x');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('generate CLI', () => {
  it.each([
    ['no model', ['--prompt', 'a'], /give one of --checkpoint PATH or --init DIR/],
    ['both models', ['--checkpoint', 'x', '--init', 'y', '--prompt', 'a'], /give one of --checkpoint PATH or --init DIR/],
    ['no prompt', ['--init', 'y'], /--prompt TEXT is required/],
    ['a negative temperature', ['--init', 'y', '--prompt', 'a', '--temperature', '-1'], /--temperature expects a number >= 0, got '-1'/],
    ['a fractional top-k', ['--init', 'y', '--prompt', 'a', '--top-k', '2.5'], /--top-k expects an integer >= 0, got '2.5'/],
    ['top-p past 1', ['--init', 'y', '--prompt', 'a', '--top-p', '1.5'], /top-p must be in \(0, 1\], got 1.5/],
    ['zero max tokens', ['--init', 'y', '--prompt', 'a', '--max-tokens', '0'], /--max-tokens expects an integer >= 1, got '0'/],
    ['a missing checkpoint', ['--checkpoint', '/nonexistent/run', '--prompt', 'a'], /--checkpoint \/nonexistent\/run: no such file or directory/],
    ['a file as checkpoint', () => ['--checkpoint', f('a-file'), '--prompt', 'a'], /expects a run directory or a checkpoint folder, not a file/],
    ['an empty folder', () => ['--checkpoint', f('xdg'), '--prompt', 'a'], /--checkpoint .*xdg: checkpoint has no config\.json/],
    ['a context past the model', () => ['--init', f('hf'), '--prompt', 'a', '--ctx', '65'], /--ctx 65 exceeds the model's max_position_embeddings 64/],
    ['a misspelt option', ['--temprature', '1'], /unknown option '--temprature' \(did you mean '--temperature'\?\)/],
  ] as const)('%s: one error line, exit 2', (_name, args, msg) => {
    const r = gen(...(typeof args === 'function' ? args() : args));
    expect(r.status, r.stderr).toBe(2);
    expect(r.error).toMatch(msg);
  });

  it('an imported Hugging Face model streams text; the same seed gives the same text, the context ends it', () => {
    const args = ['--init', f('hf'), '--prompt', 'Once upon', '--max-tokens', '12', '--temperature', '1', '--top-k', '20', '--top-p', '0.9', '--seed', '3', '--cpu'];
    const a = gen(...args);
    expect(a.status, a.stderr).toBe(0);
    expect(a.stdout.startsWith('Once upon')).toBe(true);
    expect(a.stderr).toMatch(/\d+ tokens \((reached the token limit|stopped at the end-of-text token)\); prefill [\d.]+ ms, decode [\d.]+ tokens\/s/);
    expect(gen(...args).stdout).toBe(a.stdout);
    const long = gen('--init', f('hf'), '--prompt', 'Once upon', '--max-tokens', '100', '--temperature', '0', '--ctx', '8', '--cpu');
    expect(long.status, long.stderr).toBe(0);
    expect(long.stderr).toMatch(/stopped at the context length \(8 tokens\)|end-of-text/);
  }, 300_000);

  it('a run trained by npm run train generates from its latest checkpoint; --sample-prompt sets the end-of-run sample\'s prompt', () => {
    const out = f('run');
    const t = run(trainCli(), '--model', 'micro', '--steps', '2', '--eval-every', '0', '--cpu', '--out', out, '--sample', '6', '--sample-prompt', 'ROMEO:');
    expect(t.status, t.stderr).toBe(0);
    const sample = t.stdout.split('\n')[0];
    const g = gen('--checkpoint', out, '--prompt', 'ROMEO:', '--max-tokens', '6', '--temperature', '0', '--cpu');
    expect(g.status, g.stderr).toBe(0);
    expect(g.stdout.startsWith('ROMEO:')).toBe(true);
    expect(g.stdout.trimEnd().length).toBeGreaterThan('ROMEO:'.length);
    expect(sample.length).toBeGreaterThan(0);
    expect(run(trainCli(), '--sample-prompt', 'x').error).toMatch(/--sample-prompt needs --sample N/);
  }, 300_000);
});
