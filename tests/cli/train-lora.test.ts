/**
 * `npm run train -- --lora R`: LoRA fine-tuning from the command line. Bad LoRA flags are one
 * `error:` line before the GPU starts; a run writes its adapters as a PEFT directory beside the
 * untouched base (and with --merge the merged model); --plan prices the frozen base; a LoRA run's
 * export continues as adapters (--lora with its settings) or trains on merged (no --lora).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { mergeLora } from '../../src/engine/lora/merge';
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
const small = ['--data', '', '--steps', '6', '--batch', '2', '--seq', '16', '--eval-every', '0', '--cpu'];

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'train-lora-'));
  fs.mkdirSync(f('xdg'));
  fs.writeFileSync(f('text.txt'), 'the quick brown fox jumps over the lazy dog\n'.repeat(40));
  small[1] = f('text.txt');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('train CLI: LoRA', () => {
  const cases: [string, string[], RegExp][] = [
    ['alpha without a rank', ['--lora-alpha', '8'], /--lora-alpha goes with --lora R/],
    ['a zero rank', ['--lora', '0'], /--lora expects an integer >= 1/],
    ['an unknown target', ['--lora', '4', '--lora-targets', 'q,attn'], /--lora-targets: unknown LoRA target "attn" \(valid: q, k, v, o, gate, up, down/],
    ['dropout of 1', ['--lora', '4', '--lora-dropout', '1'], /--lora-dropout expects a probability below 1/],
    ['a rank above the layers', ['--lora', '999'], /LoRA rank 999 exceeds/],
    ['--adapter without --init', ['--adapter', 'x'], /--adapter DIR needs --init/],
    ['--merge without adapters', ['--merge'], /--merge goes with --lora R or --adapter DIR/],
    ['checkpointing over quantized saved activations', ['--lora', '4', '--checkpoint-activations', '--scheme', 'agoq'], /activation checkpointing: scheme 'agoq' stores layer 0's saved activations .* quantized/],
  ];
  it.each(cases)('%s: exit 2, one error line, before the GPU', (_what, args, want) => {
    const r = train(...small, ...args, '--out', f('never'));
    expect(r.status, r.stderr).toBe(2);
    expect(r.stderr.split('\n').filter((l) => l.startsWith('error:')).join('\n')).toMatch(want);
    expect(r.stderr).not.toMatch(/adapter: /);
    expect(fs.existsSync(f('never'))).toBe(false);
  });

  it('--plan prices the frozen base: no gradients or moments of its own', () => {
    const plan = (...a: string[]) => {
      const r = train(...small, '--plan', ...a);
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { bytes: Record<string, number>; lora?: { rank: number; trainable_params: number } };
    };
    const full = plan().bytes;
    const got = plan('--lora', '4');
    expect(got.lora).toMatchObject({ rank: 4, alpha: 8, trainable_params: expect.any(Number) as number });
    const lora = got.bytes;
    expect(lora.grads).toBeLessThan(full.grads / 4);
    expect(lora.optimizer).toBeLessThan(full.optimizer / 4);
    expect(lora.total).toBeLessThan(full.total);
  });

  it('--plan with --checkpoint-activations: marked, and only the activations shrink', () => {
    const plan = (...a: string[]) => {
      const r = train(...small, '--plan', '--lora', '4', ...a);
      expect(r.status, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as { bytes: Record<string, number>; checkpoint_activations?: boolean };
    };
    const [plain, ck] = [plan(), plan('--checkpoint-activations')];
    expect(plain.checkpoint_activations).toBeUndefined();
    expect(ck.checkpoint_activations).toBe(true);
    expect(ck.bytes.activations).toBeLessThan(plain.bytes.activations);
    expect(ck.bytes.total - ck.bytes.activations).toBe(plain.bytes.total - plain.bytes.activations);
  });

  it('writes the adapters as PEFT does beside the untouched base, the merged model on request, and continues either way', () => {
    const run = f('run');
    const r = train(...small, '--lora', '4', '--lora-targets', 'q,v,down', '--export-init', '--merge', '--out', run);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).toMatch(/merged model written to/);
    const ck = loadCheckpoint(readDir(run));
    expect(ck.adapters?.spec).toEqual({ rank: 4, alpha: 8, dropout: 0, targets: ['q', 'v', 'down'] });
    const cfg = JSON.parse(fs.readFileSync(path.join(run, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    expect(cfg).toMatchObject({ peft_type: 'LORA', r: 4, lora_alpha: 8, task_type: 'CAUSAL_LM' });
    // The base is the initial model bit for bit; the merged model is base + s·B·A.
    expect(fs.readFileSync(path.join(run, 'model.safetensors')).equals(fs.readFileSync(path.join(run, 'init', 'model.safetensors')))).toBe(true);
    const merged = loadCheckpoint(readDir(path.join(run, 'merged')));
    const want = mergeLora(ck.config, ck.adapters!.spec, ck.params, ck.adapters!.tensors);
    const bytes = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
    for (const [k, v] of want) expect(bytes(merged.params.get(k)!).equals(bytes(v)), k).toBe(true);
    expect(fs.existsSync(path.join(run, 'merged', 'tokenizer.json'))).toBe(true);
    // Generation from the LoRA run is the merged model's (greedy: the same text).
    const gen = (...g: string[]) => spawnSync(process.execPath, [generateBundle(), ...g, '--prompt', 'the ', '--max-tokens', '12', '--temperature', '0', '--cpu'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    const [fromRun, fromMerged] = [gen('--checkpoint', run), gen('--init', path.join(run, 'merged'))];
    expect(fromRun.status, fromRun.stderr).toBe(0);
    expect(fromRun.stdout).toBe(fromMerged.stdout);

    // --init of a LoRA run's export with its --lora settings continues the adapters; without, trains the merged model.
    const more = train(...small, '--steps', '2', '--init', run, '--lora', '4', '--lora-targets', 'q,v,down', '--out', f('more'));
    expect(more.status, more.stderr).toBe(0);
    const mismatch = train(...small, '--init', run, '--lora', '8', '--out', f('never2'));
    expect(mismatch.status).toBe(2);
    expect(mismatch.stderr).toMatch(/--init's adapter is rank 4, alpha 8, targets q,v,down: pass the same --lora settings/);
    const full = train(...small, '--plan', '--init', run);
    expect(full.status, full.stderr).toBe(0);
    expect(full.stderr).toMatch(/merging its LoRA adapters \(rank 4\) into the model/);
    expect(JSON.parse(full.stdout)).not.toHaveProperty('lora');
    // A PEFT directory alone (what PeftModel.save_pretrained writes) continues over --init's base.
    const peft = f('peft');
    fs.mkdirSync(peft);
    for (const n of ['adapter_config.json', 'adapter_model.safetensors']) fs.copyFileSync(path.join(run, n), path.join(peft, n));
    const cont = train(...small, '--steps', '2', '--init', path.join(run, 'merged'), '--adapter', peft, '--out', f('cont'));
    expect(cont.status, cont.stderr).toBe(0);
    expect(loadCheckpoint(readDir(f('cont'))).adapters?.spec.targets).toEqual(['q', 'v', 'down']);
  }, 600_000);
});
