import { useEffect, useRef, useState } from 'react';
import { canContinue, isActive, runAccounting, runCsv, runJson, type RunState } from '../state/runs';
import { useLab, useLabApi } from './context';
import { mergedExportFiles } from '../worker/checkpoint-archive';
import { download, downloadCheckpoint, fileSlug } from './download';
import { formatCount } from './format';
import { LossChart } from './LossChart';
import { MemoryTable } from './MemoryTable';
import { RunStats } from './RunStats';
import { RunGeneratePanel } from './GeneratePanel';
import { SamplePanel } from './SamplePanel';

const ERROR_TITLES: Record<string, string> = {
  webgpu: 'WebGPU unavailable',
  gpu: 'GPU error',
  oom: 'Out of GPU memory',
  'device-lost': 'GPU device lost',
  config: 'Invalid settings',
};

function Controls({ run }: { run: RunState }) {
  const { runs } = useLabApi();
  const [busy, setBusy] = useState<string | null>(null);
  const s = run.status;
  const exportCheckpoint = async (merged: boolean) => {
    setBusy('checkpoint');
    try {
      const files = await runs.checkpoint(run.id);
      if (!files) throw new Error('no checkpoint yet');
      // Merging runs on this thread: a few seconds at most for the models a page fine-tunes.
      if (merged) downloadCheckpoint(`${fileSlug(run.label)}-merged`, mergedExportFiles(files));
      else downloadCheckpoint(fileSlug(run.label), files);
    } finally {
      setBusy(null);
    }
  };
  return (
    <div className="buttons run-controls">
      {s === 'running' && <button type="button" data-testid="pause" onClick={() => runs.pause(run.id)}>Pause</button>}
      {s === 'pausing' && <button type="button" data-testid="pause" disabled>Pausing…</button>}
      {s === 'paused' && <button type="button" data-testid="resume" onClick={() => void runs.resume(run.id)}>Resume</button>}
      {canContinue(run) && (
        <button type="button" data-testid="resume" onClick={() => void runs.resume(run.id)}
          title={`from the checkpoint after step ${run.checkpointStep}${(run.latest?.step ?? -1) + 1 > run.checkpointStep! ? `: steps ${run.checkpointStep! + 1}–${run.latest!.step + 1} are trained again` : ''}`}>
          Resume from step {run.checkpointStep}&apos;s checkpoint
        </button>
      )}
      {isActive(run) && (
        <button type="button" data-testid="stop" disabled={s === 'stopping'} onClick={() => runs.stop(run.id)}>
          {s === 'stopping' ? 'Stopping…' : 'Stop'}
        </button>
      )}
      <button type="button" data-testid="export-json" onClick={() => download(`${fileSlug(run.label)}.json`, runJson(run) + '\n', 'application/json')}>JSON</button>
      <button type="button" data-testid="export-csv" onClick={() => download(`${fileSlug(run.label)}.csv`, runCsv(run), 'text/csv')}>CSV</button>
      <button type="button" data-testid="export-checkpoint" disabled={run.checkpointStep === null || busy !== null} onClick={() => void exportCheckpoint(false)}
        title={run.config.lora
          ? 'a zip of the frozen base model (model.safetensors, config.json, tokenizer.json) with the LoRA adapter as PEFT writes it (adapter_config.json, adapter_model.safetensors); drop it on Data to continue'
          : 'a zip of the Hugging Face folder: model.safetensors, config.json, tokenizer.json (drop it on Data to start from it)'}>
        Checkpoint
      </button>
      {run.config.lora && (
        <button type="button" data-testid="export-merged" disabled={run.checkpointStep === null || busy !== null} onClick={() => void exportCheckpoint(true)}
          title="a zip of the full Hugging Face model with the LoRA adapters merged in (W + α/r·B·A): runs without PEFT">
          Merged model
        </button>
      )}
      {!isActive(run) && (
        <button type="button" data-testid="remove" onClick={() => runs.remove(run.id)}>Remove</button>
      )}
    </div>
  );
}

/** The run's label; a click turns it into a field (Enter or leaving it renames, Escape cancels). */
function RunLabel({ run }: { run: RunState }) {
  const { store } = useLabApi();
  const [editing, setEditing] = useState<string | null>(null);
  if (editing === null) {
    return (
      <button type="button" className="run-label" data-testid="run-label" title="Rename this run" onClick={() => setEditing(run.label)}>
        {run.label}
      </button>
    );
  }
  const commit = () => {
    store.getState().renameRun(run.id, editing);
    setEditing(null);
  };
  return (
    <input className="run-label-input" data-testid="run-label-input" aria-label="Run name" value={editing} autoFocus maxLength={120}
      onChange={(e) => setEditing(e.target.value)} onBlur={commit}
      onKeyDown={(e) => { if (e.key === 'Enter') commit(); else if (e.key === 'Escape') setEditing(null); }} />
  );
}

/** Everything about one run: controls, numbers, its loss curve, memory, samples, and its error if it failed. */
export function RunView({ runId, color, selected, onSelect }: { runId: string; color: string; selected: boolean; onSelect(on: boolean): void }) {
  const run = useLab((s) => s.runs[runId]);
  const card = useRef<HTMLElement>(null);
  // A run just started here (not one restored or continued): its card comes into view and takes the
  // focus, so the next Tab reaches its controls. Instant: a smooth scroll costs frames a software GPU needs.
  const justStarted = useLab((s) => s.activeRunId === runId) && run?.status === 'starting' && run.train.length === 0 && Date.now() - run.startedAt < 5000;
  const fresh = useRef(justStarted);
  useEffect(() => {
    if (!fresh.current || !card.current) return;
    // Not when a queued run starts while the user works elsewhere: only from the form (Start, Enter in a field) or nothing focused.
    const at = document.activeElement;
    if (at && at !== document.body && !at.closest('[data-testid="run-form"]')) return;
    card.current.scrollIntoView({ block: 'start' });
    card.current.focus({ preventScroll: true });
  }, []);
  if (!run) return null;
  const acc = runAccounting(run);
  const lastQuant = run.quant.at(-1);
  return (
    <section ref={card} tabIndex={-1} aria-label={`Run ${run.label}`} className="run" data-testid="run" data-run-id={run.id} data-status={run.status} data-checkpoint-step={run.checkpointStep ?? ''} style={{ borderTopColor: color }}>
      <h2>
        {!isActive(run) && (
          <input type="checkbox" className="run-select" data-testid="run-select" aria-label={`Select ${run.label}`} checked={selected} onChange={(e) => onSelect(e.target.checked)} />
        )}
        <i className="swatch" style={{ background: color }} /> <RunLabel run={run} />
        {run.info && <span className="muted small"> · {run.info.adapter}</span>}
      </h2>
      <p className="muted small">
        data <span data-testid="run-data">{run.config.dataset}{run.config.data && ` (${formatCount(run.config.data.tokens.train + run.config.data.tokens.val)} tokens)`}</span>
        {' '}· tokenizer <span data-testid="run-tokenizer">{run.config.tokenizer ? `${run.config.tokenizer.source}, ${run.config.tokenizer.vocabSize} tokens` : 'characters'}</span>
        {run.config.init && <> · from <span data-testid="run-init">{run.config.init.name}</span></>} · scheme {run.config.scheme?.name ?? 'fp32'}: saved activations <b data-testid="run-bits" data-value={acc.saved.overall}>{acc.saved.overall.toFixed(2)}</b> bits/element,
        gradients {acc.grads.bits.toFixed(2)}{acc.tp && `, TP ${acc.tp.degree} × ${acc.tp.codec}`}
        {run.info?.gemmPaths?.includes('int8') && <> · GEMMs <span data-testid="run-gemm-paths">{run.info.gemmPaths}</span></>}
        {run.info?.tuning && (
          <> · kernels <span data-testid="run-tuning" data-status={run.info.tuning.status}>{run.info.tuning.label}</span>
            {run.info.tuning.status !== 'tuned' && <> (<a href={`bench.html?preset=${run.config.preset}&batch=${run.config.batch}&seq=${run.config.seq}&scheme=${encodeURIComponent(run.config.scheme?.name ?? 'fp32')}#tune`} data-testid="run-tune-link">tune this GPU</a>)</>}</>
        )}
        {lastQuant && (
          <>
            {' '}· quantization error after step {lastQuant.step + 1}:{' '}
            <b data-testid="run-qerr">
              {Math.min(...lastQuant.errors.map((e) => e.rel_err)).toFixed(3)} – {Math.max(...lastQuant.errors.map((e) => e.rel_err)).toFixed(3)}
            </b>
          </>
        )}
      </p>
      <Controls run={run} />
      {run.error && (
        <div className="error" role="alert" data-testid="run-error">
          <b>{ERROR_TITLES[run.error.kind] ?? 'Training failed'}:</b> {run.error.message}
          {run.checkpointStep !== null && ' (the last checkpoint is kept)'}
        </div>
      )}
      {run.storageError && (
        <div className="error" role="alert" data-testid="run-storage-error">
          <b>Not saved in this browser:</b> {run.storageError}. The run goes on; export it (JSON, checkpoint) to keep it.
        </div>
      )}
      {(run.status === 'starting' || run.status === 'pausing' || run.status === 'stopping') && (
        <div className="progress" data-testid="run-progress"><span className="spinner" /> {run.phase}</div>
      )}
      <RunStats run={run} />
      <div className="run-body">
        <LossChart train={run.train} val={run.val} color={color} />
        <MemoryTable mem={run.latest?.mem ?? run.info?.memory ?? null} />
      </div>
      <SamplePanel samples={run.samples} />
      {run.checkpointStep !== null && <RunGeneratePanel runId={run.id} checkpointStep={run.checkpointStep} />}
    </section>
  );
}
