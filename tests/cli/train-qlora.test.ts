/**
 * `npm run train -- --lora R --qlora int4|nf4|int8`: QLoRA from the command line. Bad --qlora flags are
 * one `error:` line before the GPU starts; --plan shows the quantized base (smaller weights than
 * LoRA's fp32 base); a run writes its adapters, the codec's dequantized base it trained over, and
 * the merged model (generation from a run's merged model is the LoRA CLI test's).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { dequantizeRowGroupsRef, quantizeRowGroupsRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { mergeLora } from '../../src/engine/lora/merge';
import { defaultQloraSpec, resolveQloraPlan } from '../../src/engine/lora/qlora/plan';
import { bundleForTests, ROOT } from '../helpers/bundle';

const bundled = bundleForTests('src/cli/train.ts');
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
    ['an unknown format', ['--lora', '4', '--qlora', 'nf5'], /--qlora expects one of int4, nf4, int8 \(the frozen base's storage\), got 'nf5'/],
    ['no adapters', ['--qlora', 'int4'], /--qlora goes with --lora R or --adapter DIR/],
    ['INT8 compute', ['--lora', '4', '--qlora', 'int4', '--scheme', 'int8'], /QLoRA runs the quantized base's GEMMs in fp32 or f16 .* asks layer 0 for INT8/],
  ];
  it.each(cases)('%s: exit 2, one error line', (_what, args, want) => {
    const r = train(...small, ...args, '--plan');
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr.split('\n').filter((l) => l.startsWith('error:')).join('\n')).toMatch(want);
  });

  it('--plan shows the quantized base: INT4 = NF4 weights below INT8 below LoRA\'s fp32 base', () => {
    const plan = (...a: string[]) => {
      const r = train(...small, '--plan', '--lora', '4', ...a);
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { bytes: Record<string, number>; qlora?: { format: string; group: number; quantized_params: number } };
    };
    const lora = plan();
    const q4 = plan('--qlora', 'int4');
    const q8 = plan('--qlora', 'int8');
    const nf4 = plan('--qlora', 'nf4');
    expect(lora.qlora).toBeUndefined();
    expect(nf4.qlora).toEqual({ ...q4.qlora, format: 'nf4' });
    expect(nf4.bytes.weights).toBe(q4.bytes.weights);
    expect(q4.qlora).toMatchObject({ format: 'int4', group: 64, quantized_params: expect.any(Number) as number });
    expect(q4.bytes.weights).toBeLessThan(q8.bytes.weights);
    expect(q8.bytes.weights).toBeLessThan(lora.bytes.weights);
    expect(q4.bytes.total).toBeLessThan(lora.bytes.total);
  });

  it('trains the adapters over the INT4 base: the run holds the codec\'s dequantized base, the adapters, and the merged model', () => {
    const run = f('run');
    // One process (each costs a SwiftShader compile): --sample goes through the QLoRA trainer's on-request decoder.
    const r = train(...small, '--lora', '4', '--qlora', 'int4', '--export-init', '--merge', '--sample', '4', '--out', run);
    expect(r.status, r.stderr).toBe(0);
    const ck = loadCheckpoint(readDir(run));
    expect(ck.adapters?.spec.rank).toBe(4);
    // run.json's spec keeps the base's format: --resume quantizes the checkpoint's (dequantized) base again.
    expect((JSON.parse(fs.readFileSync(path.join(run, 'run.json'), 'utf8')) as { spec: { qlora?: unknown } }).spec.qlora).toEqual({ format: 'int4', group: 64 });
    // The base written is the initial model through the codec (INT4 row groups of gcd(64, width)), the rest as it was.
    const init = loadCheckpoint(readDir(path.join(run, 'init')));
    const plan = resolveQloraPlan(init.config, defaultQloraSpec('int4'));
    const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    for (const [k, v] of init.params) {
      const l = plan.byName.get(k);
      const q = l && quantizeRowGroupsRef(v, l.rows, l.cols, 'int4', l.G);
      const want = l && q ? dequantizeRowGroupsRef(q.codes, q.scales, l.rows, l.cols, 'int4', l.G) : v;
      expect(bytes(ck.params.get(k)!).equals(bytes(want)), k).toBe(true);
    }
    // The merged export is that base with the adapters merged in.
    const merged = loadCheckpoint(readDir(path.join(run, 'merged')));
    for (const [k, v] of mergeLora(ck.config, ck.adapters!.spec, ck.params, ck.adapters!.tensors)) expect(bytes(merged.params.get(k)!).equals(bytes(v)), k).toBe(true);
  }, 600_000);
});
