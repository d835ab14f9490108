import { AppErrors } from './AppErrors';
import { runColor } from './colors';
import { ComparePanel } from './ComparePanel';
import { useLab } from './context';
import { ErrorBoundary } from './ErrorBoundary';
import { GroupPanel } from './GroupPanel';
import { RunForm } from './RunForm';
import { RunView } from './RunView';
import { SchemeEditor } from './SchemeEditor';
import { WebGpuNotice } from './WebGpuNotice';

export function App() {
  const order = useLab((s) => s.runOrder);
  return (
    <main className="lab" data-testid="lab">
      <header>
        <h1>WebGPU LLaMA quantization lab</h1>
        <a href={`${import.meta.env.BASE_URL}bench.html`} data-testid="bench-link">
          Benchmarks
        </a>
        <p className="muted">
          Train small LLaMA-style models in this tab, on your GPU, under fp32 and quantized schemes, side by side.
        </p>
      </header>
      <WebGpuNotice />
      <AppErrors />
      <div className="setup">
        <ErrorBoundary where="settings">
          <RunForm />
        </ErrorBoundary>
        <ErrorBoundary where="scheme editor">
          <SchemeEditor />
        </ErrorBoundary>
      </div>
      <ErrorBoundary where="peer group">
        <GroupPanel />
      </ErrorBoundary>
      <ErrorBoundary where="comparison">
        <ComparePanel />
      </ErrorBoundary>
      {order.length === 0 ? (
        <p className="muted" data-testid="no-run">No run yet: pick a model and a scheme, and press Start run. Several runs can train at once.</p>
      ) : (
        <div className="runs" data-testid="runs">
          {order.map((id, i) => (
            <ErrorBoundary key={id} where="run">
              <RunView runId={id} color={runColor(i)} />
            </ErrorBoundary>
          ))}
        </div>
      )}
    </main>
  );
}
