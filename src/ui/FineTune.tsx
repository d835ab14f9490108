import { useStore } from 'zustand';
import { LORA_TARGETS, type LoraSpec, type LoraTarget } from '../engine/lora/spec';
import { defaultQloraSpec, QLORA_FORMATS, type QloraFormat } from '../engine/lora/qlora/plan';
import { DEFAULT_LORA, loraLabel, sameLoraSpec } from '../worker/protocol';
import { useLab, useLabApi } from './context';
import { NumberField } from './NumberField';

/**
 * What the next run trains: every parameter, or LoRA adapters over the frozen model (rank, alpha,
 * dropout, target layers). Meant for an imported model, offered on a from-scratch one too. An
 * imported LoRA export offers to continue its adapters (the same settings) or to train the merged model.
 */
export function FineTune() {
  const { store, data } = useLabApi();
  const draft = useLab((s) => s.draft);
  const imported = useStore(data.state, (d) => d.imported?.model.adapters ?? null);
  const setDraft = store.getState().setDraft;
  const lora = draft.lora;
  const set = (patch: Partial<LoraSpec>) => setDraft({ lora: { ...(lora ?? DEFAULT_LORA), ...patch } });
  // Alpha follows 2·rank until the user sets it to something else.
  const onRank = (rank: number | undefined) => {
    if (rank === undefined || !lora) return;
    set({ rank, ...(lora.alpha === 2 * lora.rank ? { alpha: 2 * rank } : {}) });
  };
  const toggle = (t: LoraTarget, on: boolean) => {
    if (!lora) return;
    // Kept in the layer's order; an empty list is allowed here and refused by the form's check, with the reason.
    set({ targets: LORA_TARGETS.filter((x) => (x === t ? on : lora.targets.includes(x))) });
  };
  const imp = imported && (lora && sameLoraSpec(lora, imported) ? 'continue' : lora ? 'new' : 'merged');
  return (
    <fieldset className="fine-tune" data-testid="fine-tune">
      <legend>{draft.init ? 'Fine-tune' : 'Trained parameters'}</legend>
      <label className="check">
        <input type="radio" name="fine-tune" data-testid="ft-full" checked={!lora} onChange={() => setDraft({ lora: undefined })} /> full (every parameter)
      </label>
      <label className="check" title="low-rank adapters over the frozen model: only they get gradients and optimizer state (PEFT's conventions)">
        <input type="radio" name="fine-tune" data-testid="ft-lora" checked={!!lora} onChange={() => setDraft({ lora: imported ?? DEFAULT_LORA })} /> LoRA
      </label>
      {lora && (
        <div className="lora-fields">
          <NumberField label="Rank" testId="lora-rank" integer min={1} value={lora.rank} onChange={onRank} />
          <NumberField label="Alpha (scale α/r)" testId="lora-alpha" min={0} value={lora.alpha} onChange={(alpha) => alpha !== undefined && set({ alpha })} />
          <NumberField label="Dropout" testId="lora-dropout" min={0} value={lora.dropout} onChange={(dropout) => dropout !== undefined && set({ dropout })} />
          <label className="field" title="QLoRA: the frozen base's q/k/v/o/gate/up/down weights kept on the GPU only as INT4, NF4 (QLoRA's NormalFloat: finer near zero, ~14 % less reconstruction error than INT4 on normal weights) or INT8 codes (a scale per 64 inputs); fp32 compute, or f16 under an f16 scheme (each linear dequantized to f16 before its GEMM)">
            <span>Base weights</span>
            <select data-testid="lora-base" value={draft.qlora?.format ?? 'fp32'}
              onChange={(e) => setDraft({ qlora: e.target.value === 'fp32' ? undefined : defaultQloraSpec(e.target.value as QloraFormat) })}>
              <option value="fp32">fp32</option>
              {QLORA_FORMATS.map((f) => <option key={f} value={f}>{f.toUpperCase()} (QLoRA)</option>)}
            </select>
          </label>
          <span className="field">
            <span>Target layers</span>
            <span>
              {LORA_TARGETS.map((t) => (
                <label key={t} className="check small">
                  <input type="checkbox" data-testid={`lora-target-${t}`} checked={lora.targets.includes(t)} onChange={(e) => toggle(t, e.target.checked)} /> {t}
                </label>
              ))}
            </span>
          </span>
        </div>
      )}
      {imported && (
        <p className="small" data-testid="imported-adapters" data-choice={imp ?? ''}>
          The imported model carries LoRA adapters ({loraLabel(imported)}):{' '}
          {imp === 'continue' ? 'this run continues them.' : imp === 'merged' ? 'this run trains the model with them merged in.' : 'this run trains new adapters over the model with them merged in.'}{' '}
          {imp !== 'continue' && <button type="button" className="small" data-testid="continue-adapters" onClick={() => setDraft({ lora: imported })}>continue the adapters</button>}
          {imp !== 'merged' && <button type="button" className="small" data-testid="train-merged" onClick={() => setDraft({ lora: undefined })}>train the merged model</button>}
        </p>
      )}
    </fieldset>
  );
}
