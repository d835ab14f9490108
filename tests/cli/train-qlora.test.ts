/**
 * `npm run train -- --lora R --qlora int4|int8`: QLoRA from the command line. Bad --qlora flags are
 * one `error:` line before the GPU starts; --plan shows the quantized base (smaller weights than
 * LoRA's fp32 base); a run writes its adapters and the dequantized base it trained over, and
 * generation from the run equals its merged export's.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { bundleForTests, ROOT } from '../helpers/bundle';

const bundled = bundleForTests('src/cli/train.ts');
const generateBundle = bundleForTests('src/cli/generate.ts');
let dir: string;
const f = (name: string) => path.join(dir, name);

function train(...args: string[]) {
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 300_000, env: { ...process.env, XDG_RUNTIME_DIR: f('xdg') } });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const readDir = (d: string) => Object.fromEntries(fs.readdirSync(d).filter((n) => /\.(json|safetensors)$/.test(n)).map((n) => [n, new Uint8Array(fs.readFileSync(path.join(d, n)))]));
const small = ['--data', '', '--steps', '3', '--batch', '2', '--seq', '16', '--eval-every', '0', '--cpu'];

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'train-qlora-'));
  fs.mkdirSync(f('xdg'));
  fs.writeFileSync(f('text.txt'), 'the quick brown fox jumps over the lazy dog\n'.repeat(40));
  small[1] = f('text.txt');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('train CLI: QLoRA', () => {
  const cases: [string, string[], RegExp][] = [
    ['an unknown format', ['--lora', '4', '--qlora', 'nf3'], /--qlora expects int4 or int8, got 'nf3'/],
    ['no adapters', ['--qlora', 'int4'], /--qlora goes with --lora R or --adapter DIR/],
    ['f16 compute', ['--lora', '4', '--qlora', 'int4', '--scheme', 'f16'], /QLoRA runs the quantized base's GEMMs in fp32/],
  ];
  it.each(cases)('%s: exit 2, one error line', (_what, args, want) => {
    const r = train(...small, ...args, '--plan');
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr.split('\n').filter((l) => l.startsWith('error:')).join('\n')).toMatch(want);
  });

  it('--plan shows the quantized base: INT4 weights below INT8 below LoRA\'s fp32 base', () => {
    const plan = (...a: string[]) => {
      const r = train(...small, '--plan', '--lora', '4', ...a);
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { bytes: Record<string, number>; qlora?: { format: string; group: number; quantized_params: number } };
    };
    const lora = plan();
    const q4 = plan('--qlora', 'int4');
    const q8 = plan('--qlora', 'int8');
    expect(lora.qlora).toBeUndefined();
    expect(q4.qlora).toMatchObject({ format: 'int4', group: 64, quantized_params: expect.any(Number) as number });
    expect(q4.bytes.weights).toBeLessThan(q8.bytes.weights);
    expect(q8.bytes.weights).toBeLessThan(lora.bytes.weights);
    expect(q4.bytes.total).toBeLessThan(lora.bytes.total);
  });

  it('trains the adapters over the INT4 base; generation from the run equals its merged export', () => {
    const run = f('run');
    const r = train(...small, '--lora', '4', '--qlora', 'int4', '--merge', '--out', run);
    expect(r.status, r.stderr).toBe(0);
    const ck = loadCheckpoint(readDir(run));
    expect(ck.adapters?.spec.rank).toBe(4);
    // run.json's spec keeps the base's format: --resume quantizes the checkpoint's (dequantized) base again.
    expect((JSON.parse(fs.readFileSync(path.join(run, 'run.json'), 'utf8')) as { spec: { qlora?: unknown } }).spec.qlora).toEqual({ format: 'int4', group: 64 });
    const gen = (...g: string[]) => spawnSync(process.execPath, [generateBundle(), ...g, '--prompt', 'the ', '--max-tokens', '8', '--temperature', '0', '--cpu'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    const [fromRun, fromMerged] = [gen('--checkpoint', run), gen('--init', path.join(run, 'merged'))];
    expect(fromRun.status, fromRun.stderr).toBe(0);
    expect(fromRun.stdout).toBe(fromMerged.stdout);
  }, 600_000);
});
