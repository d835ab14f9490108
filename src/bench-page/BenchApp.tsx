/**
 * The benchmark page: the suites of `npm run bench` on this browser's GPU. The form picks suites,
 * a size (quick / full), reps and warm-up; a worker runs them and streams rows into a table and a
 * GEMM throughput chart; a baseline JSON fills the ratio column; the download is the CLI's JSON.
 */
import { useEffect, useMemo, useReducer, useRef, useState } from 'react';
import { ErrorBoundary } from '../ui/ErrorBoundary';
import { download } from '../ui/download';
import { SUITE_NAMES, type SuiteName } from '../lab/suites';
import { BenchTable } from './BenchTable';
import { type BenchHandle, launchBench } from './client';
import { GemmChart } from './GemmChart';
import { GpuInfo } from './GpuInfo';
import { TunePanel } from './TunePanel';
import { type GpuProbe, probeGpu } from './probe';
import { BenchRequestSchema, type SizePreset } from './protocol';
import { benchJson, benchReducer, gemmSeries, IDLE, type LoadedBaseline, readBaselineFile, type SuiteState, withBaseline } from './state';

const SUITE_HELP: Record<SuiteName, string> = {
  gemm: 'fp32 GEMM GFLOP/s: squares and the models\' forward/dX/dW shapes',
  qgemm: 'INT8 and weight-only INT4/INT8/FP8 GEMMs, GOP/s',
  codec: 'TACO compress/decompress and FP8/INT4/INT8 quantize, GB/s',
  step: 'a full training step per model and scheme, tokens/s',
  generate: 'KV-cache generation per model: decode tokens/s after a prompt',
  allreduce: 'mean all-reduce fp32/int8 over in-process peers (no GPU)',
};

/** Quick mode steps one small model under fp32 only (bench/suites.ts planDefaults): said as such. */
const QUICK_STEP_HELP = 'a full training step of micro under fp32 (quick; full mode: per model and scheme), tokens/s';

/** A number field's text: blank means "the suite's default". */
function optionalInt(text: string): number | undefined {
  return text.trim() === '' ? undefined : Number(text);
}

export function BenchApp() {
  const [probe, setProbe] = useState<GpuProbe>({ state: 'checking' });
  const [suites, setSuites] = useState<SuiteName[]>([...SUITE_NAMES]);
  const [size, setSize] = useState<SizePreset>('quick');
  const [reps, setReps] = useState('');
  const [warmup, setWarmup] = useState('');
  const [variants, setVariants] = useState<'' | 'all' | 'heuristic' | 'pick'>('');
  const [state, dispatch] = useReducer(benchReducer, IDLE);
  const [baseline, setBaseline] = useState<LoadedBaseline | null>(null);
  const [baselineError, setBaselineError] = useState<string | null>(null);
  const handle = useRef<BenchHandle | null>(null);

  useEffect(() => {
    let live = true;
    void probeGpu().then((p) => live && setProbe(p));
    return () => {
      live = false;
      handle.current?.stop();
    };
  }, []);

  const request = { suites: SUITE_NAMES.filter((s) => suites.includes(s)), size, reps: optionalInt(reps), warmup: optionalInt(warmup), variants: variants || undefined };
  const checked = BenchRequestSchema.safeParse(request);
  const problem = checked.success ? null : checked.error.issues.map((i) => `${i.path.join('.') || 'request'}: ${i.message}`).join('; ');
  const running = state.phase === 'running';
  const merged = useMemo(() => withBaseline(state.rows, baseline), [state.rows, baseline]);
  const series = useMemo(() => gemmSeries(merged.rows), [merged.rows]);

  const start = () => {
    if (!checked.success || running) return;
    dispatch({ type: 'start', request: checked.data, date: new Date().toISOString() });
    handle.current = launchBench(checked.data, dispatch);
  };
  const stop = () => handle.current?.stop();
  const loadBaseline = async (file: File | undefined) => {
    if (!file) return;
    try {
      setBaseline(readBaselineFile(file.name, await file.text()));
      setBaselineError(null);
    } catch (e) {
      setBaselineError((e as Error).message);
    }
  };
  const save = () => {
    const json = benchJson(state, baseline, navigator.userAgent);
    download(`bench-${(state.date ?? 'run').replace(/[:.]/g, '-')}.json`, JSON.stringify(json, null, 2) + '\n', 'application/json');
  };

  return (
    <main className="lab bench" data-testid="bench-page">
      <header className="bench-header">
        <div>
          <h1>WebGPU benchmarks</h1>
          <p className="muted">
            The suites of <code>npm run bench</code> on this browser&apos;s GPU: the same kernels and problems, timed with GPU timestamps where the browser
            allows, else wall clock.
          </p>
        </div>
        <a href={import.meta.env.BASE_URL} data-testid="lab-link">
          ← Back to the lab
        </a>
      </header>

      <ErrorBoundary where="GPU information">
        <GpuInfo probe={probe} measured={state.gpu} />
        <TunePanel />
      </ErrorBoundary>

      <section className="bench-form" data-testid="bench-form">
        <fieldset className="suites">
          <legend>Suites</legend>
          {SUITE_NAMES.map((s) => (
            <label key={s} className="suite-pick" title={SUITE_HELP[s]}>
              <input
                type="checkbox"
                data-testid={`suite-${s}`}
                checked={suites.includes(s)}
                disabled={running}
                onChange={(e) => setSuites((xs) => (e.target.checked ? [...xs, s] : xs.filter((x) => x !== s)))}
              />{' '}
              {s} <span className="muted small">{s === 'step' && size === 'quick' ? QUICK_STEP_HELP : SUITE_HELP[s]}</span>
            </label>
          ))}
        </fieldset>
        <div className="run-form">
          <label className="field">
            Sizes
            <select data-testid="size" value={size} disabled={running} onChange={(e) => setSize(e.target.value as SizePreset)}>
              <option value="quick">quick: micro shapes (seconds on a GPU; minutes on a software GPU, mostly compiling shaders)</option>
              <option value="full">full: the CLI&apos;s defaults (up to 8192³, small and base)</option>
            </select>
          </label>
          <label className="field">
            Reps
            <input data-testid="reps" type="number" min={1} placeholder="default" value={reps} disabled={running} onChange={(e) => setReps(e.target.value)} />
          </label>
          <label className="field">
            Warm-up
            <input data-testid="warmup" type="number" min={0} placeholder="default" value={warmup} disabled={running} onChange={(e) => setWarmup(e.target.value)} />
          </label>
          <label className="field">
            GEMM variants
            <select data-testid="variants" value={variants} disabled={running} onChange={(e) => setVariants(e.target.value as typeof variants)}>
              <option value="">as the size sets it ({size === 'quick' ? 'quick: the engine\'s pick only' : 'full: every variant'})</option>
              <option value="pick">only the engine&apos;s pick (its measured table, else the heuristic)</option>
              <option value="heuristic">only the heuristic&apos;s pick</option>
              <option value="all">every variant</option>
            </select>
          </label>
          <button type="button" data-testid="run" className="primary" disabled={running || !!problem || probe.state !== 'available'} onClick={start}>
            Run
          </button>
          <button type="button" data-testid="stop" disabled={!running} onClick={stop}>
            Stop
          </button>
          {problem && <p className="form-problem">{problem}</p>}
        </div>
        <div className="run-form">
          <label className="field">
            Load baseline JSON (bench/torch_baseline.py, or a bench --json file)
            <input data-testid="baseline-input" type="file" accept=".json,application/json" onChange={(e) => void loadBaseline(e.target.files?.[0])} />
          </label>
          {baseline && (
            <p className="small" data-testid="baseline-status" data-matched={merged.matched}>
              Baseline <b>{baseline.baseline.source}</b> ({baseline.file}): {baseline.baseline.rows.length} rows, {merged.matched} matched{' '}
              <button type="button" onClick={() => setBaseline(null)}>
                Clear
              </button>
            </p>
          )}
          <button type="button" data-testid="download-json" disabled={state.rows.length === 0} onClick={save}>
            Download JSON
          </button>
        </div>
        {baselineError && (
          <p className="error" role="alert" data-testid="baseline-error">
            {baselineError}
          </p>
        )}
      </section>

      <SuiteStatus suites={state.suites} phase={state.phase} error={state.error} />

      <ErrorBoundary where="GEMM chart">
        <GemmChart points={series} />
      </ErrorBoundary>
      <ErrorBoundary where="results table">
        <BenchTable rows={merged.rows} />
      </ErrorBoundary>
    </main>
  );
}

function SuiteStatus({ suites, phase, error }: { suites: Partial<Record<SuiteName, SuiteState>>; phase: string; error: string | null }) {
  const entries = Object.entries(suites) as [SuiteName, SuiteState][];
  return (
    <section className="suite-status" data-testid="bench-status" data-phase={phase}>
      {error && (
        <p className="error" role="alert" data-testid="bench-error">
          {error}
        </p>
      )}
      {entries.length > 0 && (
        <ul>
          {entries.map(([name, s]) => (
            <li key={name} data-testid={`status-${name}`} data-state={s.state} className={`suite-${s.state}`}>
              <b>{name}</b>: {s.state === 'running' ? 'running…' : s.state}
              {s.state === 'error' && (
                <span className="error" role="alert" data-testid={`error-${name}`}>
                  {s.message}
                </span>
              )}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}
