/**
 * `npm run tune`: bad input (an option, a malformed or foreign --import file, a corrupt cache) is one
 * `error:` line and exit 2 before the GPU starts; import/export without a model needs no GPU; on
 * SwiftShader `train --tune` fills the cache and runs with every kernel choice tuned (run.json says
 * so), and `tune --model micro` then finds every choice in the cache.
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TuneCache } from '../../src/engine/tune';
import { bundleForTests, ROOT } from '../helpers/bundle';

const tune = bundleForTests('src/cli/tune.ts');
const train = bundleForTests('src/cli/train.ts');
let dir: string;
const f = (name: string) => path.join(dir, name);

function run(bundle: () => string, args: string[], cache = f('cache/tune.json')) {
  const r = spawnSync(process.execPath, [bundle(), ...args], {
    cwd: ROOT, encoding: 'utf8', timeout: 600_000, env: { ...process.env, XDG_RUNTIME_DIR: f('xdg'), LAB_TUNE_CACHE: cache },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function errorLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.startsWith('error:'));
  expect(lines, stderr).toHaveLength(1);
  return lines[0];
}

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100', description: 'NVIDIA H100 80GB HBM3' };

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'tune-cli-'));
  fs.mkdirSync(f('xdg'));
  fs.writeFileSync(f('foreign.json'), JSON.stringify({ preset: 'micro', model: { hidden_size: 32 }, batch: 4 }));
  fs.writeFileSync(f('broken.json'), '{"format": "webgpu-quant-lab/tune-cache", ');
  const c = new TuneCache();
  c.put(H100, 'matmul', '8192x768x768NN', { picks: ['128x128k8_8x16'], ms: 0.1, candidates: 5, at: '2026-12-06T00:00:00.000Z' });
  fs.writeFileSync(f('h100.json'), c.serialize());
  fs.writeFileSync(f('proto.json'), c.serialize().replace('"8192x768x768NN"', '"__proto__"'));
  fs.mkdirSync(f('corrupt'));
  fs.writeFileSync(f('corrupt/tune.json'), 'not json');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('tune CLI: bad input', () => {
  const cases: [string, string[], RegExp, string?][] = [
    ['a negative budget', ['--budget-s', '-1'], /--budget-s expects a number >= 1, got '-1'/],
    ['an unknown option', ['--budgt-s', '5'], /unknown option '--budgt-s'.*--budget-s/],
    ['a missing import', ['--import', 'nope.json'], /--import nope\.json: no such file/],
    ['a foreign import', ['--import', 'foreign.json'], /--import \S*foreign\.json: not a tuning cache/],
    ['a broken import', ['--import', 'broken.json'], /--import \S*broken\.json: not JSON/],
    ['a hostile key', ['--import', 'proto.json'], /'__proto__' is not a matmul choice key/],
    ['an unknown model', ['--model', 'huge'], /--model expects one of/],
    ['a corrupt cache', ['--model', 'micro', '--cpu'], /tuning cache .*corrupt.*not JSON.*delete it/, 'corrupt/tune.json'],
  ];
  for (const [what, args, msg, cache] of cases) {
    it(`${what}: exit 2, one error line, nothing written`, () => {
      const r = run(tune, args.map((a) => (a.endsWith('.json') && !a.startsWith('nope') ? f(a) : a)), cache ? f(cache) : undefined);
      expect(r.status, r.stderr).toBe(2);
      expect(errorLine(r.stderr)).toMatch(msg);
      expect(r.stderr).not.toMatch(/adapter:/); // the GPU never started
      if (!cache) expect(fs.existsSync(f('cache/tune.json'))).toBe(false);
    });
  }

  it('train --tune with a corrupt cache is bad input; without --tune it warns and runs on defaults', () => {
    const bad = run(train, ['--model', 'micro', '--steps', '1', '--cpu', '--tune', '--out', f('never')], f('corrupt/tune.json'));
    expect(bad.status, bad.stderr).toBe(2);
    expect(errorLine(bad.stderr)).toMatch(/tuning cache .*not JSON/);
    const budget = run(train, ['--model', 'micro', '--tune-budget-s', '5', '--out', f('never')]);
    expect(budget.status).toBe(2);
    expect(errorLine(budget.stderr)).toMatch(/--tune-budget-s goes with --tune/);
    expect(fs.existsSync(f('never'))).toBe(false);
  });
});

describe('tune CLI: import and export without a GPU', () => {
  it('merges a valid file into the cache and exports it', () => {
    const r = run(tune, ['--import', f('h100.json'), '--export', f('out.json')]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/adapter:/);
    const out = TuneCache.parse(fs.readFileSync(f('out.json'), 'utf8'));
    expect(out.get(H100, 'matmul', '8192x768x768NN')?.picks).toEqual(['128x128k8_8x16']);
    expect(TuneCache.parse(fs.readFileSync(f('cache/tune.json'), 'utf8')).get(H100, 'matmul', '8192x768x768NN')).toBeDefined();
  });
});

describe('tune CLI on SwiftShader', () => {
  // One tune: train --tune tunes in the process that trains (the run reuses the pipelines the tune
  // compiled, where a separate `tune` would compile them twice), then `tune` finds every choice cached.
  it('train --tune fills the cache and reports every kernel choice tuned; tune --model micro then finds all cached', () => {
    const cache = f('gpu/tune.json');
    const t0 = performance.now();
    const t = run(train, ['--model', 'micro', '--steps', '2', '--cpu', '--tune', '--tune-budget-s', '240', '--out', f('run')], cache);
    console.log(`train --tune --model micro --steps 2 on SwiftShader: ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    expect(t.status, t.stderr).toBe(0);
    expect(t.stderr).toMatch(/tune: 22 tuned, 0 from the cache, 0 unfinished/);
    expect(t.stderr).toMatch(/kernels: tuned/);
    expect(t.stderr).toMatch(/tune: step check skipped: a CPU adapter/); // the step check times GPUs only (lab/tune-check.ts)
    const info = JSON.parse(fs.readFileSync(f('run/run.json'), 'utf8'));
    expect(info.tuning).toMatchObject({ status: 'tuned', label: 'tuned', tune: { tuned: 22, cached: 0, unfinished: 0 } });
    expect(info.tuning.counts.heuristic + info.tuning.counts.table + info.tuning.counts.seed).toBe(0);
    const r = run(tune, ['--model', 'micro', '--cpu'], cache);
    expect(r.status, r.stderr).toBe(0);
    const summary = JSON.parse(r.stdout.trim().split('\n').pop()!);
    expect(summary, r.stderr).toMatchObject({ tuned: 0, cached: 22, unfinished: 0 });
  }, 900_000);
});
