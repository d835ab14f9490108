// The bench page's pure logic: the reducer over worker messages, baseline reading and merging (the
// CLI's parseBaseline/mergeBaseline), the download's shape, the GEMM chart's series, and the
// request → SuitePlan mapping that makes the page measure the CLI's problems.
import { describe, expect, it } from 'vitest';
import type { BenchRow } from '../lab/suites';
import { BenchRequestSchema, type GpuReport, QUICK_GEMM_SIZES, suitePlan } from './protocol';
import { benchJson, benchReducer, gemmSeries, IDLE, readBaselineFile, withBaseline, type BenchState } from './state';

const gemmRow = (n: number, value: number, o: { best?: boolean; transB?: boolean; M?: number } = {}): BenchRow => ({
  suite: 'gemm', name: `${n}`, key: o.best === false ? undefined : `gemm/${o.M ?? n}x${n}x${n}/N${o.transB ? 'T' : 'N'}`, unit: 'GFLOP/s', value, ms: 1, method: 'timestamp', show: true,
  detail: { M: o.M ?? n, N: n, K: n, transA: false, transB: !!o.transB, variant: 'v', best: o.best ?? true, heuristic: true },
});
const codecRow: BenchRow = { suite: 'codec', name: 'taco compress n=4096 G=128', unit: 'GB/s', value: 3, ms: 0.1, method: 'wallclock', show: true };
const report: GpuReport = {
  adapter: { vendor: 'google', architecture: 'swiftshader', device: '', description: 'SwiftShader' },
  features: { subgroups: true, timestampQuery: false, shaderF16: true, subgroupMatrix: false },
  subgroupMatrixConfigs: [],
  i8TensorCores: undefined,
  dawnFeatures: ['shader-f16', 'subgroups'],
  limits: { maxStorageBufferBindingSize: 1 << 27, maxComputeWorkgroupStorageSize: 16384, maxComputeInvocationsPerWorkgroup: 256 },
};

function started(suites = ['gemm', 'codec'] as ('gemm' | 'codec')[]): BenchState {
  return benchReducer(IDLE, { type: 'start', request: { suites, size: 'quick', reps: 3 }, date: '2026-01-02T03:04:05.000Z' });
}

describe('benchReducer', () => {
  it('streams rows and keeps a failed suite apart from the others', () => {
    let s = started();
    expect(s.phase).toBe('running');
    expect(s.suites).toEqual({ gemm: { state: 'pending' }, codec: { state: 'pending' } });
    s = benchReducer(s, { type: 'gpu', report });
    s = benchReducer(s, { type: 'suite', suite: 'gemm', status: 'running' });
    s = benchReducer(s, { type: 'row', row: gemmRow(64, 1.5) });
    s = benchReducer(s, { type: 'suite', suite: 'gemm', status: 'error', kind: 'device-lost', message: 'The GPU device was lost' });
    s = benchReducer(s, { type: 'suite', suite: 'codec', status: 'running' });
    s = benchReducer(s, { type: 'row', row: codecRow });
    s = benchReducer(s, { type: 'suite', suite: 'codec', status: 'done' });
    s = benchReducer(s, { type: 'done' });
    expect(s.phase).toBe('done');
    expect(s.gpu).toBe(report);
    expect(s.rows.map((r) => r.suite)).toEqual(['gemm', 'codec']);
    expect(s.suites).toEqual({ gemm: { state: 'error', message: 'The GPU device was lost' }, codec: { state: 'done' } });
  });

  it('Stop marks unfinished suites stopped, keeps the rows, and ignores late messages', () => {
    let s = started();
    s = benchReducer(s, { type: 'suite', suite: 'gemm', status: 'running' });
    s = benchReducer(s, { type: 'row', row: gemmRow(32, 1) });
    s = benchReducer(s, { type: 'stopped' });
    expect(s.phase).toBe('stopped');
    expect(s.suites).toEqual({ gemm: { state: 'stopped' }, codec: { state: 'stopped' } });
    const late = benchReducer(s, { type: 'row', row: gemmRow(64, 2) });
    expect(late).toBe(s);
    expect(late.rows).toHaveLength(1);
  });

  it('a fatal error (no WebGPU in the worker) ends the run with its message', () => {
    const s = benchReducer(started(), { type: 'error', kind: 'webgpu', message: 'WebGPU is not available: no GPU adapter was found' });
    expect(s).toMatchObject({ phase: 'error', error: 'WebGPU is not available: no GPU adapter was found', suites: { gemm: { state: 'stopped' } } });
    // A new run starts clean.
    expect(started(['codec'])).toMatchObject({ phase: 'running', error: null, rows: [], suites: { codec: { state: 'pending' } } });
  });
});

describe('baselines', () => {
  const torch = JSON.stringify({ source: 'torch 2.11 cuda', rows: [{ key: 'gemm/64x64x64/NN', name: 'cuBLAS sgemm', value: 3, unit: 'GFLOP/s' }, { key: 'gemm/32x32x32/NN', value: 0 }] });

  it('merges by key into copies, skipping rows without a key and non-positive baselines', () => {
    const rows = [gemmRow(64, 1.5), gemmRow(32, 1), codecRow];
    const b = readBaselineFile('torch.json', torch);
    const m = withBaseline(rows, b);
    expect(m.matched).toBe(1);
    expect(m.rows[0]).toMatchObject({ ratio: 0.5, baseline: { value: 3, name: 'cuBLAS sgemm', source: 'torch 2.11 cuda' } });
    expect(m.rows[1].ratio).toBeUndefined();
    expect(m.rows[2].ratio).toBeUndefined();
    expect(rows[0].ratio).toBeUndefined(); // the measured rows stay as they were
    expect(withBaseline(rows, null)).toMatchObject({ matched: 0 });
  });

  it('accepts a bench --json file (rows without key dropped) and names the file in errors', () => {
    const bench = readBaselineFile('run.json', JSON.stringify({ command: 'bench gemm', rows: [gemmRow(64, 6), codecRow] }));
    expect(bench.baseline).toEqual({ source: 'run.json', rows: [expect.objectContaining({ key: 'gemm/64x64x64/NN', value: 6 })] });
    expect(() => readBaselineFile('x.json', '{not json')).toThrow(/^x\.json: not JSON/);
    expect(() => readBaselineFile('x.json', JSON.stringify({ rows: [{ key: 1, value: 2 }] }))).toThrow(/^x\.json: expected \{"source", "rows"/);
    expect(() => readBaselineFile('x.json', JSON.stringify({ rows: [{ key: 'a', value: '2' }] }))).toThrow(/expected/);
    expect(() => readBaselineFile('x.json', '[]')).toThrow(/expected/);
    expect(() => readBaselineFile('x.json', 'null')).toThrow(/expected/);
  });
});

describe('benchJson', () => {
  it('has the keys of `npm run bench -- all --json`, with merged rows and the match count', () => {
    let s = benchReducer(started(), { type: 'gpu', report });
    s = benchReducer(s, { type: 'row', row: gemmRow(64, 1.5) });
    const b = readBaselineFile('t.json', JSON.stringify({ source: 'torch', rows: [{ key: 'gemm/64x64x64/NN', value: 3 }] }));
    const out = benchJson(s, b, 'Mozilla/5.0 test') as Record<string, unknown> & { rows: BenchRow[] };
    expect(out).toMatchObject({
      command: 'bench-page gemm,codec --quick --reps 3', argv: ['gemm,codec', '--quick', '--reps', '3'], date: '2026-01-02T03:04:05.000Z', userAgent: 'Mozilla/5.0 test',
      adapter: report.adapter, features: report.features, dawnFeatures: report.dawnFeatures, limits: report.limits, baseline: { file: 't.json', source: 'torch', matched: 1 },
    });
    expect(out.rows[0].ratio).toBe(0.5);
    // Round-trips as JSON, and without a baseline has no baseline key.
    expect(JSON.parse(JSON.stringify(benchJson(s, null, 'ua')))).not.toHaveProperty('baseline');
  });
});

describe('gemmSeries', () => {
  it('takes the best variant of square NN problems, sorted by size, with the baseline where merged', () => {
    const rows = withBaseline(
      [gemmRow(128, 4), gemmRow(32, 1), gemmRow(32, 0.5, { best: false }), gemmRow(64, 2, { transB: true }), gemmRow(64, 2.5, { M: 128 }), gemmRow(64, 3), codecRow],
      readBaselineFile('t.json', JSON.stringify({ source: 't', rows: [{ key: 'gemm/64x64x64/NN', value: 6 }] })),
    ).rows;
    expect(gemmSeries(rows)).toEqual([{ n: 32, ours: 1 }, { n: 64, ours: 3, baseline: 6 }, { n: 128, ours: 4 }]);
  });
});

describe('suitePlan', () => {
  it('quick: the CLI --quick plan (micro, fp32, the engine\'s pick) with more GEMM squares for the chart', () => {
    const p = suitePlan({ suites: ['gemm'], size: 'quick' });
    expect(p).toMatchObject({ quick: true, sizes: { gemm: QUICK_GEMM_SIZES }, variants: 'pick', ranks: 4, reps: undefined, warmup: undefined });
    expect(p.shapes.map((s) => s.preset)).toEqual(['micro']);
    expect(p.shapes[0].model.vocab_size).toBe(65);
    expect(p.schemes.map((s) => s.name)).toEqual(['fp32']);
  });

  it('full: the CLI defaults; reps, warm-up and variants pass through', () => {
    const p = suitePlan({ suites: ['step'], size: 'full', reps: 7, warmup: 0, variants: 'heuristic' });
    expect(p).toMatchObject({ quick: false, sizes: undefined, variants: 'heuristic', reps: 7, warmup: 0 });
    // The presets' recipes (src/engine/train/options.ts), as the CLI uses them without --batch/--seq.
    expect(p.shapes.map((s) => [s.preset, s.batch, s.seq])).toEqual([['small', 64, 256], ['base', 16, 512]]);
    expect(p.schemes.map((s) => s.name)).toEqual(['fp32', 'agoq', 'w8a8g8', 'taco']);
  });

  it('rejects malformed requests with a message', () => {
    const bad = [{ suites: [], size: 'quick' }, { suites: ['nope'], size: 'quick' }, { suites: ['gemm'], size: 'huge' }, { suites: ['gemm'], size: 'quick', reps: 0 }, { suites: ['gemm'], size: 'quick', extra: 1 }];
    for (const r of bad) expect(BenchRequestSchema.safeParse(r).success, JSON.stringify(r)).toBe(false);
    expect(BenchRequestSchema.safeParse({ suites: ['gemm', 'allreduce'], size: 'full', reps: 5 }).success).toBe(true);
  });
});
