import { PRESET_NAMES, PRESETS, countParams, type PresetName } from '../engine/model/config';
import { isActive } from '../state/runs';
import { checkRunConfig } from '../worker/protocol';
import { useLab, useLabApi } from './context';
import { formatCount } from './format';
import { NumberField } from './NumberField';

/** The settings of the next run, and Start / Stop. */
export function RunForm() {
  const { store, runs } = useLabApi();
  const draft = useLab((s) => s.draft);
  const gpuOk = useLab((s) => s.gpu.state === 'available');
  const active = useLab((s) => (s.activeRunId ? s.runs[s.activeRunId] : undefined));
  const setDraft = store.getState().setDraft;
  const busy = active !== undefined && isActive(active);
  const problem = checkRunConfig(draft);
  const onPreset = (preset: PresetName) => setDraft({ preset });

  return (
    <form className="run-form" data-testid="run-form" onSubmit={(e) => { e.preventDefault(); if (!busy) runs.start(); }}>
      <label className="field">
        <span>Model</span>
        <select data-testid="preset" value={draft.preset} disabled={busy} onChange={(e) => onPreset(e.target.value as PresetName)}>
          {PRESET_NAMES.map((p) => (
            <option key={p} value={p}>
              {p} (~{formatCount(countParams(PRESETS[p]))} params)
            </option>
          ))}
        </select>
      </label>
      <NumberField label="Steps" testId="steps" integer min={1} value={draft.steps} disabled={busy} onChange={(v) => v !== undefined && setDraft({ steps: v })} />
      <NumberField label="Batch" testId="batch" integer min={1} value={draft.batch} disabled={busy} onChange={(v) => v !== undefined && setDraft({ batch: v })} />
      <NumberField label="Context" testId="seq" integer min={2} value={draft.seq} disabled={busy} onChange={(v) => v !== undefined && setDraft({ seq: v })} />
      <NumberField label="Learning rate" testId="lr" optional placeholder="preset default" value={draft.lr} disabled={busy} onChange={(lr) => setDraft({ lr })} />
      <NumberField label="Seed" testId="seed" integer min={0} value={draft.seed} disabled={busy} onChange={(v) => v !== undefined && setDraft({ seed: v })} />
      <NumberField label="Eval every" testId="eval-every" integer min={0} value={draft.evalEvery} disabled={busy} onChange={(v) => v !== undefined && setDraft({ evalEvery: v })} />
      <NumberField label="Eval batches" testId="eval-batches" integer min={1} value={draft.evalBatches} disabled={busy} onChange={(v) => v !== undefined && setDraft({ evalBatches: v })} />
      <NumberField label="Sample every" testId="sample-every" integer min={0} value={draft.sampleEvery} disabled={busy} onChange={(v) => v !== undefined && setDraft({ sampleEvery: v })} />
      <NumberField label="Sample length" testId="sample-length" integer min={0} value={draft.sampleLength} disabled={busy} onChange={(v) => v !== undefined && setDraft({ sampleLength: v })} />
      <div className="buttons">
        {busy ? (
          <button type="button" data-testid="stop" disabled={active.status === 'stopping'} onClick={() => runs.stop(active.id)}>
            {active.status === 'stopping' ? 'Stopping…' : 'Stop'}
          </button>
        ) : (
          <button type="submit" data-testid="start" disabled={!gpuOk || problem !== null}>
            Start
          </button>
        )}
      </div>
      {problem && <p className="form-problem" data-testid="config-problem">{problem}</p>}
    </form>
  );
}
