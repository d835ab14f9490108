/**
 * `npm run train -- --init hf:ID`: the model is downloaded from a local server in the Hub's layout
 * (HF_ENDPOINT; tests/fixtures/hf-llama as a Hub repo) into the user's cache ($XDG_CACHE_HOME), then
 * imported exactly like `--init DIR`: the same plan and the same step-0 loss as the fixture folder; a
 * second run reads the cache without a request; refusals are one `error:` line and exit 2.
 */
import { spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';
import { fixtureRepo, FIXTURE_ROOT, startHubServer, type HubServer } from '../helpers/hub-server';

const bundled = bundleForTests('src/cli/train.ts');
const generate = bundleForTests('src/cli/generate.ts');
let dir: string;
let hub: HubServer;

/** Async: the server answers from this process, so the CLI cannot be waited for synchronously. */
function train(args: string[], env: Record<string, string> = {}, entry = bundled): Promise<{ status: number | null; stdout: string; stderr: string; error: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [entry(), ...args], {
      cwd: ROOT, env: { ...process.env, XDG_RUNTIME_DIR: path.join(dir, 'xdg'), XDG_CACHE_HOME: path.join(dir, 'cache'), HF_ENDPOINT: hub.endpoint, HF_TOKEN: '', ...env },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (status) => resolve({ status, stdout, stderr, error: stderr.split('\n').filter((l) => l.startsWith('error:')).join('\n') }));
  });
}
const losses = (run: string) => readFileSync(path.join(run, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l)).filter((m) => m.loss !== undefined).map((m) => [m.step, m.loss]);

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), 'train-hub-'));
  mkdirSync(path.join(dir, 'xdg'));
  hub = await startHubServer();
  hub.repos.set('lab/hf-llama', fixtureRepo('hf-llama/model', 'hf-llama/tokenizer'));
  // The same files as one folder: what --init DIR reads.
  mkdirSync(path.join(dir, 'folder'));
  for (const sub of ['model', 'tokenizer']) cpSync(path.join(FIXTURE_ROOT, 'hf-llama', sub), path.join(dir, 'folder'), { recursive: true });
  writeFileSync(path.join(dir, 'text.txt'), readFileSync(path.join(ROOT, 'public/data/tinyshakespeare.txt'), 'utf8').slice(0, 20_000));
});
afterAll(async () => {
  await hub?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe('train CLI: --init hf:ID', () => {
  it('downloads into the cache and imports like the folder: the same plan, the same step-0 loss; the second run makes no request', async () => {
    const common = ['--data', path.join(dir, 'text.txt'), '--seq', '16', '--batch', '2', '--eval-every', '0', '--cpu'];
    const viaHub = await train(['--init', 'hf:lab/hf-llama', ...common, '--plan']);
    expect(viaHub.status, viaHub.stderr).toBe(0);
    expect(viaHub.stderr).toMatch(/hub: lab\/hf-llama: 8 files, .* -> .*models--lab--hf-llama\/main/);
    const cached = path.join(dir, 'cache', 'webgpu-quant-lab', 'hub', 'models--lab--hf-llama', 'main');
    expect(readdirSync(cached).sort()).toEqual(['.complete.json', 'config.json', 'generation_config.json', 'model-00001-of-00003.safetensors',
      'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors', 'model.safetensors.index.json', 'tokenizer.json', 'tokenizer_config.json']);
    const direct = await train(['--init', path.join(dir, 'folder'), ...common, '--plan']);
    expect(direct.status, direct.stderr).toBe(0);
    expect(JSON.parse(viaHub.stdout)).toEqual(JSON.parse(direct.stdout));

    const requests = hub.log.length;
    const a = await train(['--init', 'hf:lab/hf-llama', ...common, '--steps', '1', '--out', path.join(dir, 'a')]);
    expect(a.status, a.stderr).toBe(0);
    expect(a.stderr).toMatch(/hub: lab\/hf-llama from the cache/);
    expect(hub.log.length).toBe(requests);
    const b = await train(['--init', path.join(dir, 'folder'), ...common, '--steps', '1', '--out', path.join(dir, 'b')]);
    expect(b.status, b.stderr).toBe(0);
    expect(losses(path.join(dir, 'a'))).toEqual(losses(path.join(dir, 'b')));
    expect(JSON.parse(readFileSync(path.join(dir, 'a', 'run.json'), 'utf8')).init).toBe(cached);

    // npm run generate takes hf:ID too (from the cache here): greedy text equal to the folder's.
    const gen = ['--prompt', 'First Citizen', '--max-tokens', '6', '--temperature', '0', '--cpu'];
    const g1 = await train(['--init', 'hf:lab/hf-llama', ...gen], {}, generate);
    const g2 = await train(['--init', path.join(dir, 'folder'), ...gen], {}, generate);
    expect(g1.status, g1.stderr).toBe(0);
    expect(g2.status, g2.stderr).toBe(0);
    expect(g1.stdout).toBe(g2.stdout);
    expect(hub.log.length).toBe(requests);
  }, 600_000); // six CLI processes, four of them compiling GPU pipelines on SwiftShader

  it('refusals are one error line, exit 2, before the GPU: a missing model, a gated one without a token (then with HF_TOKEN it downloads), a bad id', async () => {
    const missing = await train(['--init', 'hf:lab/nope', '--plan']);
    expect(missing.status).toBe(2);
    expect(missing.error).toMatch(/^error: --init hf:lab\/nope: lab\/nope was not found, or is private \(HTTP 401 for config.json\); pass a token that can read it: run with HF_TOKEN=hf_\.\.\./);
    hub.repos.set('lab/gated', fixtureRepo('hf-llama/model', 'hf-llama/tokenizer'));
    hub.tokens.set('lab/gated', 'hf_ok');
    const gated = await train(['--init', 'hf:lab/gated', '--plan']);
    expect(gated.status).toBe(2);
    expect(gated.error).toMatch(/^error: --init hf:lab\/gated: lab\/gated is gated: accept its license on the model page \(HTTP 401 for config.json\); pass a token that can read it: run with HF_TOKEN=/);
    const ok = await train(['--init', 'hf:lab/gated', '--plan', '--data', path.join(dir, 'text.txt')], { HF_TOKEN: 'hf_ok' });
    expect(ok.status, ok.stderr).toBe(0);
    const bad = await train(['--init', 'hf:not a model', '--plan']);
    expect(bad.status).toBe(2);
    expect(bad.error).toMatch(/^error: --init hf:not a model: 'not a model' is not a Hugging Face model id/);
    expect(existsSync(path.join(dir, 'cache', 'webgpu-quant-lab', 'hub', 'models--lab--nope'))).toBe(false);
  });

  it('a download cut short fails (exit 1) keeping its .part; the next run resumes it with a Range request', async () => {
    hub.repos.set('lab/flaky', fixtureRepo('hf-llama/model', 'hf-llama/tokenizer'));
    hub.faults.set('lab/flaky/model-00003-of-00003.safetensors', { cutAt: 30_000 });
    const cut = await train(['--init', 'hf:lab/flaky', '--plan', '--data', path.join(dir, 'text.txt')]);
    expect(cut.status).toBe(1);
    expect(cut.error).toMatch(/^error: --init hf:lab\/flaky: lab\/flaky\/model-00003-of-00003.safetensors: the download (stopped|ended) at \d+ of 82912 bytes.*run it again to resume/);
    const part = path.join(dir, 'cache', 'webgpu-quant-lab', 'hub', 'models--lab--flaky', 'main', 'model-00003-of-00003.safetensors.part');
    expect(existsSync(part)).toBe(true);
    hub.faults.clear();
    const again = await train(['--init', 'hf:lab/flaky', '--plan', '--data', path.join(dir, 'text.txt')]);
    expect(again.status, again.stderr).toBe(0);
    expect(again.stderr).toMatch(/resuming with .* held/);
    expect(hub.log.some((l) => /^GET \/lab\/flaky\/resolve\/main\/model-00003-of-00003.safetensors bytes=\d+-$/.test(l))).toBe(true);
    expect(existsSync(part)).toBe(false);
  });
});
