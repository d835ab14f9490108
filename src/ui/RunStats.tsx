import { firstLoss, runPhase, timeLeft, valBpb, type RunState } from '../state/runs';
import { formatCount, formatLoss, formatRate } from './format';

function Stat({ label, value, testId, raw }: { label: string; value: string; testId: string; raw?: number | null }) {
  return (
    <div className="stat">
      <span className="stat-label">{label}</span>
      <span className="stat-value" data-testid={testId} data-value={raw ?? ''}>
        {value}
      </span>
    </div>
  );
}

/** Headline numbers of a run; `data-value` carries the unrounded number for tests. */
export function RunStats({ run }: { run: RunState }) {
  const m = run.latest;
  const lastVal = run.val.at(-1);
  const start = firstLoss(run);
  const left = timeLeft(run);
  const bpb = lastVal ? valBpb(run, lastVal.loss) : null;
  return (
    <div className="stats">
      <Stat label="status" testId="run-status" value={run.status === "running" || run.status === "starting" || run.status === "paused" || run.status === "interrupted" ? `${run.status}: ${runPhase(run)}` : run.status} />
      {/* Steps are 0-based in the engine and on the chart; the counter shows steps completed. */}
      {/* An interrupted run names its checkpoint beside the steps it took: it continues from there. */}
      <Stat label="steps done" testId="step" raw={m ? m.step + 1 : null}
        value={`${m ? m.step + 1 : 0} / ${run.config.steps}${run.status === 'interrupted' && run.checkpointStep !== null && (m ? m.step + 1 : 0) > run.checkpointStep ? ` (checkpoint: ${run.checkpointStep})` : ''}`} />
      <Stat label="loss" testId="loss-value" value={formatLoss(m?.loss)} raw={m?.loss ?? null} />
      <Stat label="first loss" testId="loss-first" value={formatLoss(start)} raw={start} />
      <Stat label="val loss" testId="val-loss" value={formatLoss(lastVal?.loss)} raw={lastVal?.loss ?? null} />
      {run.config.data && <Stat label="val bits/byte" testId="val-bpb" value={bpb === null ? '–' : bpb.toFixed(4)} raw={bpb} />}
      <Stat label="tokens/s" testId="tokens-per-s" value={formatRate(m?.tokens_per_s)} raw={m?.tokens_per_s ?? null} />
      <Stat label="lr" testId="lr-value" value={m ? m.lr.toExponential(2) : '–'} raw={m?.lr ?? null} />
      <Stat label="grad norm" testId="grad-norm" value={m ? m.grad_norm.toFixed(3) : '–'} raw={m?.grad_norm ?? null} />
      {m?.loss_scale !== undefined && <Stat label="loss scale" testId="loss-scale" value={m.loss_scale.toExponential(0)} raw={m.loss_scale} />}
      {m?.skipped_steps !== undefined && <Stat label="skipped steps" testId="skipped-steps" value={String(m.skipped_steps)} raw={m.skipped_steps} />}
      <Stat label="params" testId="params" value={run.info ? formatCount(run.info.params) : '–'} raw={run.info?.params ?? null} />
      <Stat label="elapsed" testId="elapsed" value={m ? `${m.elapsed_s.toFixed(1)} s` : '–'} raw={m?.elapsed_s ?? null} />
      {left !== null && <Stat label="time left (est.)" testId="time-left" value={formatDuration(left)} raw={left} />}
    </div>
  );
}

function formatDuration(s: number): string {
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
