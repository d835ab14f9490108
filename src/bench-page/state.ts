/**
 * The bench page's state, as pure functions (no DOM, no React): a reducer over the worker's
 * messages and the page's start/stop, the baseline merge for display, the JSON download (the shape
 * `npm run bench -- all --json` writes) and the GEMM chart's series.
 */
import { type Baseline, type BenchRow, mergeBaseline, parseBaseline, type SuiteName } from '../lab/suites';
import type { BenchRequest, FromBenchWorker, GpuReport } from './protocol';

export type SuiteState =
  | { state: 'pending' | 'running' | 'done' | 'stopped' }
  | { state: 'error'; message: string };

export interface BenchState {
  phase: 'idle' | 'running' | 'done' | 'stopped' | 'error';
  request: BenchRequest | null;
  /** When the run started (ISO 8601): the JSON's `date`. */
  date: string | null;
  /** The GPU the worker measured on (absent until it has a device). */
  gpu: GpuReport | null;
  suites: Partial<Record<SuiteName, SuiteState>>;
  /** Rows in the order they were measured, without baseline (merged for display by withBaseline). */
  rows: BenchRow[];
  /** A failure of the whole run (no WebGPU in the worker, a dead worker); suite failures live in `suites`. */
  error: string | null;
}

export const IDLE: BenchState = { phase: 'idle', request: null, date: null, gpu: null, suites: {}, rows: [], error: null };

export type BenchAction = { type: 'start'; request: BenchRequest; date: string } | FromBenchWorker;

/** Suites not finished when the run ends without them: stopped (Stop, a dead worker). */
function endOpenSuites(suites: BenchState['suites']): BenchState['suites'] {
  const out: BenchState['suites'] = {};
  for (const [name, s] of Object.entries(suites) as [SuiteName, SuiteState][]) {
    out[name] = s.state === 'pending' || s.state === 'running' ? { state: 'stopped' } : s;
  }
  return out;
}

export function benchReducer(s: BenchState, a: BenchAction): BenchState {
  if (a.type === 'start') {
    return { ...IDLE, phase: 'running', request: a.request, date: a.date, suites: Object.fromEntries(a.request.suites.map((n) => [n, { state: 'pending' }])) };
  }
  // Messages of a run that has ended (a late row after Stop) change nothing.
  if (s.phase !== 'running') return s;
  switch (a.type) {
    case 'gpu':
      return { ...s, gpu: a.report };
    case 'suite':
      return { ...s, suites: { ...s.suites, [a.suite]: a.status === 'error' ? { state: 'error', message: a.message } : { state: a.status } } };
    case 'row':
      return { ...s, rows: [...s.rows, a.row] };
    case 'done':
      return { ...s, phase: 'done', suites: endOpenSuites(s.suites) };
    case 'stopped':
      return { ...s, phase: 'stopped', suites: endOpenSuites(s.suites) };
    case 'error':
      return { ...s, phase: 'error', error: a.message, suites: endOpenSuites(s.suites) };
  }
}

/** A baseline the user loaded, and the file it came from. */
export interface LoadedBaseline {
  file: string;
  baseline: Baseline;
}

/** Reads a baseline file's text (bench/torch_baseline.py's output or a bench JSON); throws a message naming the file. */
export function readBaselineFile(file: string, text: string): LoadedBaseline {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`${file}: not JSON (${(e as Error).message})`);
  }
  try {
    return { file, baseline: parseBaseline(raw, file) };
  } catch (e) {
    throw new Error(`${file}: ${(e as Error).message}`);
  }
}

/** The rows with `baseline` and `ratio` set where the baseline has their key (copies; the state's rows stay as measured). */
export function withBaseline(rows: BenchRow[], b: LoadedBaseline | null): { rows: BenchRow[]; matched: number } {
  const copies = rows.map((r) => ({ ...r }));
  return { rows: copies, matched: b ? mergeBaseline(copies, b.baseline) : 0 };
}

/** The download: the keys `npm run bench -- all --json` writes, with the browser in place of Node. */
export function benchJson(s: BenchState, b: LoadedBaseline | null, userAgent: string): Record<string, unknown> {
  const r = s.request;
  const argv = r ? [r.suites.join(','), `--${r.size}`, ...(r.reps === undefined ? [] : ['--reps', String(r.reps)]),
    ...(r.warmup === undefined ? [] : ['--warmup', String(r.warmup)]), ...(r.variants ? ['--variants', r.variants] : [])] : [];
  const merged = withBaseline(s.rows, b);
  return {
    command: ['bench-page', ...argv].join(' '),
    argv,
    date: s.date,
    userAgent,
    ...(s.gpu ?? {}),
    ...(b ? { baseline: { file: b.file, source: b.baseline.source, matched: merged.matched } } : {}),
    rows: merged.rows,
  };
}

export interface GemmPoint {
  /** Square size n of the n×n×n NN problem. */
  n: number;
  ours: number;
  /** The baseline's figure for the same key (e.g. cuBLAS SGEMM), when one is loaded. */
  baseline?: number;
}

/** Throughput of the fastest variant on each square NN problem of the gemm suite, by size. */
export function gemmSeries(rows: BenchRow[]): GemmPoint[] {
  const points: GemmPoint[] = [];
  for (const r of rows) {
    const d = r.detail as { M?: number; N?: number; K?: number; transA?: boolean; transB?: boolean; best?: boolean } | undefined;
    if (r.suite !== 'gemm' || !d?.best || d.transA || d.transB || d.M !== d.N || d.N !== d.K || d.M === undefined) continue;
    points.push({ n: d.M, ours: r.value, ...(r.baseline ? { baseline: r.baseline.value } : {}) });
  }
  return points.sort((a, b) => a.n - b.n);
}
