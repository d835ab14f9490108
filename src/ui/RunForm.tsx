import { useMemo, useState } from 'react';
import { useStore } from 'zustand';
import { PRESET_NAMES, PRESETS, countParams, hfConfigJson, type PresetName } from '../engine/model/config';
import { modelFromText, runConfigProblem } from '../state/explain';
import { preflight } from '../state/preflight';
import { submitDraft } from '../state/queue';
import { runLabel } from '../state/runs';
import { trainOptionsFor } from '../worker/protocol';
import { useLab, useLabApi } from './context';
import { DataPanel } from './DataPanel';
import { FineTune } from './FineTune';
import { formatCount } from './format';
import { NumberField } from './NumberField';

/** The settings of the next run (model, data, training length) and Start; the scheme is edited beside. */
export function RunForm() {
  const { store, runs, data } = useLabApi();
  const draft = useLab((s) => s.draft);
  const gpu = useLab((s) => s.gpu);
  const gpuOk = gpu.state === 'available';
  const queueRuns = useLab((s) => s.queueRuns);
  const queued = useLab((s) => s.queued);
  const setDraft = store.getState().setDraft;
  const problem = runConfigProblem(draft);
  const limits = gpu.state === 'available' ? gpu.limits : undefined;
  // The plan against the adapter's limits: a buffer the GPU cannot hold fails only after compiling.
  const tooBig = useMemo(() => (problem ? null : preflight(trainOptionsFor(draft), limits).problem), [draft, limits, problem]);
  const [customText, setCustomText] = useState<string | null>(null);
  const [customError, setCustomErrorState] = useState<string | null>(null);
  const setCustomError = (e: string | null) => {
    setCustomErrorState(e);
    store.getState().setDraftProblem(e && `the custom model config is invalid (${e})`);
  };
  const dataBusy = useStore(data.state, (d) => d.job !== null);

  // Picking a preset while a custom config is on turns the custom config off: the dropdown shows
  // "custom" then, so it never names a model that is not the one that will train.
  const onPreset = (preset: PresetName) => {
    if (draft.model !== undefined) toggleCustom(false);
    setDraft({ preset });
  };
  const toggleCustom = (on: boolean) => {
    if (on) {
      const base = { ...hfConfigJson(PRESETS[draft.preset]) };
      setCustomText(JSON.stringify(base, null, 2));
      setCustomError(null);
      setDraft({ model: PRESETS[draft.preset] });
    } else {
      setCustomText(null);
      setCustomError(null);
      setDraft({ model: undefined });
    }
  };
  const onCustom = (text: string) => {
    setCustomText(text);
    const r = modelFromText(text, PRESETS[draft.preset]);
    if ('error' in r) {
      setCustomError(r.error);
      return;
    }
    setDraft({ model: r.model });
    setCustomError(null);
  };
  return (
    <form className="run-form" data-testid="run-form" onSubmit={(e) => { e.preventDefault(); submitDraft(store, runs); }}>
      <label className="field">
        <span>Model</span>
        <select data-testid="preset" value={draft.model ? '' : draft.preset} onChange={(e) => e.target.value && onPreset(e.target.value as PresetName)}>
          {draft.model && (
            <option value="" data-testid="preset-custom">
              custom (~{formatCount(countParams(draft.model))} params, {draft.preset}&apos;s recipe)
            </option>
          )}
          {PRESET_NAMES.map((p) => (
            <option key={p} value={p}>
              {p} (~{formatCount(countParams(PRESETS[p]))} params)
            </option>
          ))}
        </select>
      </label>
      <label className="field check">
        <span>Custom config</span>
        <input type="checkbox" data-testid="custom-model" checked={draft.model !== undefined} onChange={(e) => toggleCustom(e.target.checked)} />
      </label>
      <DataPanel />
      <FineTune />
      <NumberField label="Steps" testId="steps" integer min={1} value={draft.steps} onChange={(v) => v !== undefined && setDraft({ steps: v })} />
      <NumberField label="Batch" testId="batch" integer min={1} value={draft.batch} onChange={(v) => v !== undefined && setDraft({ batch: v })} />
      <NumberField label="Context" testId="seq" integer min={2} value={draft.seq} onChange={(v) => v !== undefined && setDraft({ seq: v })} />
      <label className="field check" title="Activation checkpointing: each layer keeps only its input and runs its forward again in the backward — far less activation memory for about one more forward a step (fp32 or f16 compute with unquantized saved activations)">
        <span>Recompute activations</span>
        <input type="checkbox" data-testid="checkpoint-activations" checked={!!draft.checkpointActivations} onChange={(e) => setDraft({ checkpointActivations: e.target.checked || undefined })} />
      </label>
      <NumberField label="Learning rate" testId="lr" optional placeholder="preset default" value={draft.lr} onChange={(lr) => setDraft({ lr })} />
      <NumberField label="Seed" testId="seed" integer min={0} value={draft.seed} onChange={(v) => v !== undefined && setDraft({ seed: v })} />
      <NumberField label="Eval every" testId="eval-every" integer min={0} value={draft.evalEvery} onChange={(v) => v !== undefined && setDraft({ evalEvery: v })} />
      <NumberField label="Eval batches" testId="eval-batches" integer min={1} value={draft.evalBatches} onChange={(v) => v !== undefined && setDraft({ evalBatches: v })} />
      <NumberField label="Sample every" testId="sample-every" integer min={0} value={draft.sampleEvery} onChange={(v) => v !== undefined && setDraft({ sampleEvery: v })} />
      <NumberField label="Sample length" testId="sample-length" integer min={0} value={draft.sampleLength} onChange={(v) => v !== undefined && setDraft({ sampleLength: v })} />
      <NumberField label="Checkpoint every" testId="checkpoint-every" integer min={1} value={draft.checkpointEvery} onChange={(v) => v !== undefined && setDraft({ checkpointEvery: v })} />
      <div className="buttons">
        <button type="submit" data-testid="start" disabled={!gpuOk || problem !== null || customError !== null || tooBig !== null || dataBusy}
          title={tooBig ?? problem ?? customError ?? (dataBusy ? 'preparing the data' : undefined)}>
          Start run
        </button>
        <label className="check small" title="Runs sharing the GPU slow each other down: queued, each run's time and tokens/s are its own">
          <input type="checkbox" data-testid="queue-runs" checked={queueRuns} onChange={(e) => store.getState().setQueueRuns(e.target.checked)} /> one run at a time
        </label>
      </div>
      {queued.length > 0 && (
        <ol className="queued small" data-testid="queued">
          {queued.map((q) => (
            <li key={q.key}>
              queued: {runLabel(q.config)}{' '}
              <button type="button" className="small" onClick={() => store.getState().takeQueued(q.key)}>drop</button>
            </li>
          ))}
        </ol>
      )}
      {customText !== null && (
        <label className="field custom-config">
          <span>Model config (Hugging Face LlamaConfig keys; vocab_size follows the data)</span>
          <textarea data-testid="custom-model-json" rows={7} spellCheck={false} value={customText} onChange={(e) => onCustom(e.target.value)} />
        </label>
      )}
      {customError && <p className="form-problem" data-testid="custom-model-problem">{customError}</p>}
      {problem && <p className="form-problem" data-testid="config-problem">{problem}</p>}
      {tooBig && <p className="form-problem" data-testid="preflight-problem">Cannot start on this GPU: {tooBig}.</p>}
    </form>
  );
}
