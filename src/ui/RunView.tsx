import { useLab } from './context';
import { LossChart } from './LossChart';
import { MemoryTable } from './MemoryTable';
import { RunStats } from './RunStats';
import { SamplePanel } from './SamplePanel';

const ERROR_TITLES: Record<string, string> = {
  webgpu: 'WebGPU unavailable',
  gpu: 'GPU error',
  'device-lost': 'GPU device lost',
  config: 'Invalid settings',
};

/** Everything about one run: numbers, loss curve, memory, samples, and its error if it failed. */
export function RunView({ runId }: { runId: string }) {
  const run = useLab((s) => s.runs[runId]);
  if (!run) return null;
  return (
    <section className="run" data-testid="run" data-run-id={run.id} data-status={run.status}>
      <h2>
        Run <span className="muted">{run.label}</span>
        {run.info && <span className="muted"> · {run.info.adapter}</span>}
      </h2>
      {run.error && (
        <div className="error" role="alert" data-testid="run-error">
          <b>{ERROR_TITLES[run.error.kind] ?? 'Training failed'}:</b>{' '}
          {run.error.message}
        </div>
      )}
      <RunStats run={run} />
      <div className="run-body">
        <LossChart train={run.train} val={run.val} />
        <MemoryTable mem={run.latest?.mem ?? run.info?.memory ?? null} />
      </div>
      <SamplePanel samples={run.samples} />
    </section>
  );
}
