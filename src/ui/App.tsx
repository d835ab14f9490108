import { useEffect, useRef, useState } from 'react';
import { isActive, runLabel } from '../state/runs';
import { AppErrors } from './AppErrors';
import { runColor } from './colors';
import { ComparePanel } from './ComparePanel';
import { useLab, useLabApi } from './context';
import { ErrorBoundary } from './ErrorBoundary';
import { GroupPanel } from './GroupPanel';
import { RunForm } from './RunForm';
import { RunView } from './RunView';
import { SchemeEditor } from './SchemeEditor';
import { WebGpuNotice } from './WebGpuNotice';

/** Removing several runs at once: the selected ones, or every finished one (asks first). */
function RunsToolbar({ selected, clear }: { selected: string[]; clear(): void }) {
  const { runs } = useLabApi();
  const all = useLab((s) => s.runs);
  const finished = Object.values(all).filter((r) => !isActive(r)).map((r) => r.id);
  const [confirming, setConfirming] = useState<string[] | null>(null);
  if (finished.length === 0) return null;
  const remove = (ids: string[]) => {
    for (const id of ids) runs.remove(id);
    clear();
    setConfirming(null);
  };
  return (
    <div className="buttons runs-toolbar" data-testid="runs-toolbar">
      {confirming ? (
        <>
          <span>Remove {confirming.length} run{confirming.length === 1 ? '' : 's'} and their checkpoints from this browser?</span>
          <button type="button" data-testid="confirm-remove" onClick={() => remove(confirming)}>Remove</button>
          <button type="button" onClick={() => setConfirming(null)}>Keep</button>
        </>
      ) : (
        <>
          <button type="button" data-testid="remove-selected" disabled={selected.length === 0} onClick={() => setConfirming(selected)}>
            Remove selected ({selected.length})
          </button>
          <button type="button" data-testid="clear-history" onClick={() => setConfirming(finished)}>
            Clear history ({finished.length} finished)
          </button>
        </>
      )}
    </div>
  );
}

/** Phones: the settings fold away once a run starts, so the run and the comparison follow the header. */
const NARROW = '(max-width: 760px)';

export function App() {
  const order = useLab((s) => s.runOrder);
  const runs = useLab((s) => s.runs);
  const draft = useLab((s) => s.draft);
  const [picked, setPicked] = useState<ReadonlySet<string>>(new Set());
  const [setupOpen, setSetupOpen] = useState(true);
  // A new run on a narrow screen folds the settings (on wide screens they stay beside the runs).
  const count = useRef(order.length);
  useEffect(() => {
    if (order.length > count.current && window.matchMedia?.(NARROW).matches) setSetupOpen(false);
    count.current = order.length;
  }, [order.length]);
  // Only finished runs that still exist can be selected.
  const selected = order.filter((id) => picked.has(id) && runs[id] && !isActive(runs[id]));
  const select = (id: string, on: boolean) => setPicked((p) => { const n = new Set(p); if (on) n.add(id); else n.delete(id); return n; });
  return (
    <main className={`lab${order.length > 0 ? ' has-runs' : ''}${setupOpen ? '' : ' setup-closed'}`} data-testid="lab">
      <header>
        <h1>WebGPU LLaMA quantization lab</h1>
        <a href={`${import.meta.env.BASE_URL}bench.html`} data-testid="bench-link">
          Benchmarks
        </a>
        <p className="muted">
          Train small LLaMA-style models in this tab, on your GPU, under fp32 and quantized schemes, side by side.
        </p>
      </header>
      <div className="notices">
        <WebGpuNotice />
        <AppErrors />
      </div>
      <section className="setup-column" aria-label="Settings of the next run">
        <div className="setup-bar">
          <button type="button" className="small" data-testid="setup-toggle" aria-expanded={setupOpen} aria-controls="setup" onClick={() => setSetupOpen(!setupOpen)}>
            {setupOpen ? 'Hide settings' : 'Settings'}
          </button>
          {!setupOpen && <span className="small muted" data-testid="setup-summary">next run: {runLabel(draft)}</span>}
        </div>
        <div className="setup" id="setup" hidden={!setupOpen}>
          <ErrorBoundary where="settings">
            <RunForm />
          </ErrorBoundary>
          <ErrorBoundary where="scheme editor">
            <SchemeEditor />
          </ErrorBoundary>
        </div>
      </section>
      <div className="workspace">
        <ErrorBoundary where="comparison">
          <ComparePanel />
        </ErrorBoundary>
        {order.length === 0 ? (
          <p className="muted" data-testid="no-run">No run yet: pick a model and a scheme, and press Start run. Several runs can train at once.</p>
        ) : (
          <>
            <RunsToolbar selected={selected} clear={() => setPicked(new Set())} />
            <div className="runs" data-testid="runs">
              {order.map((id, i) => (
                <ErrorBoundary key={id} where="run">
                  <RunView runId={id} color={runColor(i)} selected={picked.has(id)} onSelect={(on) => select(id, on)} />
                </ErrorBoundary>
              ))}
            </div>
          </>
        )}
        <ErrorBoundary where="peer group">
          <GroupPanel />
        </ErrorBoundary>
      </div>
    </main>
  );
}
