import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';

// `npm run bench -- …` is scripts/run-node.mjs bundling src/cli/bench.ts; the bundle is made once here.
let dir: string;
const bundled = bundleForTests('src/cli/bench.ts');

function bench(...args: string[]) {
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

function benchAsync(...args: string[]): Promise<{ status: number | null; stderr: string }> {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [bundled(), ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    p.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    p.on('error', reject);
    p.on('close', (status) => resolve({ status, stderr }));
  });
}

/** The one error line (Dawn may print adapter warnings to stderr before it). */
function errorLines(stderr: string): string[] {
  return stderr.split('\n').filter((l) => l.startsWith('error:'));
}

interface Row {
  suite: string; name: string; key?: string; unit: string; value: number; ms?: number; method?: string; show: boolean;
  detail?: Record<string, unknown>; baseline?: { value: number; name: string; source: string }; ratio?: number;
}
interface Out {
  command: string; argv: string[]; date: string; adapter: Record<string, string>; dawnFeatures: string[];
  features: Record<string, boolean>; rows: Row[]; baseline?: { matched: number }; measured?: { command: string };
}

function run(suite: string, ...extra: string[]): Out {
  const file = path.join(dir, `${suite}.json`);
  const r = bench(suite, '--quick', '--cpu', '--json', file, ...extra);
  expect(r.stderr.split('\n').filter((l) => l.startsWith('error:'))).toEqual([]);
  expect(r.status).toBe(0);
  const out = JSON.parse(readFileSync(file, 'utf8')) as Out;
  expect(out.command).toBe(['bench', suite, '--quick', '--cpu', '--json', file, ...extra].join(' '));
  expect(Number.isNaN(Date.parse(out.date))).toBe(false);
  expect(out.adapter.architecture).toBe('swiftshader');
  expect(out.dawnFeatures).toContain('core-features-and-limits');
  expect(typeof out.features.timestampQuery).toBe('boolean');
  for (const row of out.rows) {
    expect(row.suite).toBe(suite);
    expect(Number.isFinite(row.value) && row.value > 0).toBe(true);
    // Every shown row is in the table on stdout.
    if (row.show) expect(r.stdout).toContain(row.name);
  }
  return out;
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'bench-cli-'));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('bench CLI --quick on SwiftShader', () => {
  it('gemm: a square and one layer\'s forward/dX/dW GEMMs, keyed for the baseline', () => {
    const out = run('gemm');
    const keys = out.rows.map((r) => r.key);
    // micro: C=32, q_proj 32→32, M = 4·32 = 128 tokens.
    expect(keys).toEqual(['gemm/64x64x64/NN', 'gemm/128x32x32/NT', 'gemm/128x32x32/NN', 'gemm/32x32x128/TN']);
    for (const r of out.rows) {
      expect(r.unit).toBe('GFLOP/s');
      expect(['timestamp', 'wallclock']).toContain(r.method);
      expect(r.detail).toMatchObject({ best: true, heuristic: true });
    }
  }, 60_000);

  it('gemm --shapes: any M×N×K and layout, no default squares without --sizes', () => {
    const out = run('gemm', '--shapes', '68x36x20:TN,8x12x4', '--model', 'none');
    expect(out.rows.map((r) => r.key)).toEqual(['gemm/68x36x20/TN', 'gemm/8x12x4/NN']);
  }, 60_000);

  it('codec: TACO both ways (compulsory traffic and fp32 bytes), the round trip, its FP8 baseline and the three quantize formats', () => {
    const out = run('codec');
    expect(out.rows.map((r) => r.name)).toEqual([
      'taco compress n=4096 G=128', 'taco decompress n=4096 G=128',
      'taco compress fp32 in n=4096 G=128', 'taco decompress fp32 out n=4096 G=128',
      'taco compress+decompress fp32 n=4096 G=128', 'taco compress+decompress fp32, 10 dispatches per pass n=4096 G=128',
      'taco round trip fp32 n=4096 G=128',
      "fp8-e4m3 quantize (taco's in-run baseline) n=4096 G=128",
      'quantize fp8-e4m3 n=4096 G=128', 'quantize int4 n=4096 G=128', 'quantize int8 n=4096 G=128',
    ]);
    expect(out.rows.every((r) => r.unit === 'GB/s')).toBe(true);
    // The issue's measure is 4n over the two kernels' times added.
    const row = (name: string) => out.rows.find((r) => r.name.startsWith(name))!;
    const pair = row('taco compress+decompress');
    expect(pair.ms).toBeCloseTo(row('taco compress n=').ms! + row('taco decompress n=').ms!, 9);
    expect(pair.value).toBeCloseTo((4 * 4096) / pair.ms! / 1e6, 6);
    // And the same from back-to-back dispatches: the two kernels' per-dispatch times, added.
    const b2b = row('taco compress+decompress fp32, 10 dispatches');
    const bd = b2b.detail as { compressMs: number; decompressMs: number };
    expect(b2b.ms).toBeCloseTo(bd.compressMs + bd.decompressMs, 9);
    expect(b2b.value).toBeCloseTo((4 * 4096) / b2b.ms! / 1e6, 6);
  }, 60_000);

  it('generate: decode tokens/s of the KV-cache decoder on micro after a prefill', () => {
    const out = run('generate', '--seq', '16');
    expect(out.rows).toHaveLength(1);
    const r = out.rows[0];
    expect(r).toMatchObject({ suite: 'generate', unit: 'tokens/s', method: 'wallclock', detail: { preset: 'micro', ctx: 16, prompt: 4, steps: 7 } });
    expect(r.value).toBeCloseTo(1000 / (r.ms as number), 6);
  }, 60_000);

  it('step: tokens/s and the memory ledger of a micro fp32 step, merged with a baseline by key', () => {
    const base = path.join(dir, 'base.json');
    const key = 'step/C32-L2-H4-KV2-F64-V65-tied/B2xT8';
    writeFileSync(base, JSON.stringify({ source: 'test', rows: [{ key, name: 'torch', value: 1e9, unit: 'tokens/s' }] }));
    const out = run('step', '--batch', '2', '--seq', '8', '--reps', '1', '--warmup', '0', '--baseline', base);
    // The wall-clock step, then (with timestamp queries) the same dispatches' GPU time, without a key.
    expect(out.rows.length).toBe(out.features?.timestampQuery ? 2 : 1);
    if (out.rows.length === 2) {
      expect(out.rows[1]).toMatchObject({ suite: 'step', method: 'timestamp', name: expect.stringMatching(/GPU time$/) });
      expect(out.rows[1].key).toBeUndefined();
      expect(out.rows[1].value).toBeCloseTo((2 * 8) / ((out.rows[1].ms as number) / 1000), 6);
    }
    const r = out.rows[0];
    expect(r).toMatchObject({ suite: 'step', unit: 'tokens/s', key, detail: { preset: 'micro', scheme: 'fp32', batch: 2, seq: 8 } });
    const mem = r.detail?.mem as Record<string, number>;
    expect(mem.weights).toBeGreaterThan(0);
    expect(mem.total).toBe(Object.entries(mem).filter(([k]) => k !== 'total').reduce((s, [, v]) => s + v, 0));
    expect(r.detail?.plan).toEqual(mem);
    expect(r.value).toBeCloseTo((2 * 8) / ((r.ms as number) / 1000), 6);
    expect(out.baseline?.matched).toBe(1);
    expect(r.baseline).toEqual({ value: 1e9, name: 'torch', source: 'test' });
    expect(r.ratio).toBeCloseTo(r.value / 1e9, 12);

    // report: the same rows re-merged without measuring.
    const again = path.join(dir, 'again.json');
    const rep = bench('report', '--input', path.join(dir, 'step.json'), '--baseline', base, '--json', again);
    expect(rep.status).toBe(0);
    expect(rep.stdout).toContain('x'); // the ratio column
    const o2 = JSON.parse(readFileSync(again, 'utf8')) as Out;
    expect(o2.rows[0].ratio).toBeCloseTo(r.ratio as number, 12);
    expect(o2.measured?.command).toBe(out.command);
  }, 60_000);

  it('bad options exit 2 with one error line', async () => {
    const cases: [string[], RegExp][] = [
      [['nosuch'], /unknown suite 'nosuch'/],
      [['gemm', 'step'], /expected one suite/],
      [['gemm', '--reps', '0'], /--reps expects an integer >= 1/],
      [['gemm', '--bogus'], /Unknown option '--bogus'/],
      [['gemm', '--shapes', '64x64'], /--shapes: '64x64' is not MxNxK\[:XY\]/],
      [['gemm', '--shapes', '8x8x8:NX'], /--shapes: '8x8x8:NX'/],
      [['step', '--scheme', 'nope'], /--scheme: unknown preset 'nope'/],
      [['gemm', '--baseline', '/nonexistent/base.json'], /--baseline \/nonexistent\/base.json/],
      [['step', '--batch', '5000'], /invalid training options; batch: /],
      [['step', '--i8-split-max', '0'], /--i8-split-max expects an integer >= 1/],
      [['step', '--i8tc-layout', '99'], /--i8tc-layout: 99 is past the \d+ layouts/],
      [['step', '--attn-dq', 'sideways'], /--attn-dq: 'sideways' is not stored or recompute/],
      [['step', '--tq-variant', 'staged9'], /--tq-variant: 'staged9' is not one of direct1, direct4, staged1, staged4/],
      [['step', '--weight-codes', 'per-layer'], /--weight-codes: 'per-layer' is not one of per-gemm, per-step/],
    ];
    // Concurrently: each is a process start (~1 s), none touches the GPU.
    const results = await Promise.all(cases.map(([args]) => benchAsync(...args)));
    results.forEach((r, i) => {
      const label = JSON.stringify(cases[i][0]);
      expect(r.status, label).toBe(2);
      const lines = errorLines(r.stderr);
      expect(lines, label).toHaveLength(1);
      expect(lines[0], label).toMatch(cases[i][1]);
    });
  }, 60_000);

  it('a baseline file of the wrong shape is a usage error', () => {
    const bad = path.join(dir, 'bad.json');
    writeFileSync(bad, JSON.stringify({ rows: [{ key: 1 }] }));
    const r = bench('gemm', '--baseline', bad);
    expect(r.status).toBe(2);
    expect(errorLines(r.stderr)).toEqual([expect.stringMatching(/expected \{"source", "rows"/)]);
  });
});
