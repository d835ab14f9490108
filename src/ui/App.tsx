import { AppErrors } from './AppErrors';
import { useLab } from './context';
import { ErrorBoundary } from './ErrorBoundary';
import { RunForm } from './RunForm';
import { RunView } from './RunView';
import { WebGpuNotice } from './WebGpuNotice';

export function App() {
  const activeRunId = useLab((s) => s.activeRunId);
  return (
    <main className="lab" data-testid="lab">
      <header>
        <h1>WebGPU LLaMA training lab</h1>
        <p className="muted">
          Train a small LLaMA-style model on TinyShakespeare, in this tab, on your GPU.
        </p>
      </header>
      <WebGpuNotice />
      <AppErrors />
      <ErrorBoundary where="settings">
        <RunForm />
      </ErrorBoundary>
      <ErrorBoundary where="run">
        {activeRunId ? <RunView runId={activeRunId} /> : <p className="muted" data-testid="no-run">No run yet: pick a model and press Start.</p>}
      </ErrorBoundary>
    </main>
  );
}
