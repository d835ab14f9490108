import { useMemo, useState } from 'react';
import { PRESETS } from '../engine/model/config';
import { computeProblem } from '../engine/plan/run-plan';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { layerScheme, SAVED_KIND_LABEL, SAVED_KINDS, savedSpec, unsupportedFeatures, type SavedKind, type Scheme } from '../engine/scheme/scheme';
import type { MemReport } from '../engine/gpu/memory';
import { planMemory, resolveTrainingPlan, type TrainingPlan } from '../engine/plan/train-plan';
import { cellLabel, commonCell, gemmPaths, GRID_FORMATS, parseSchemeText, savedBits, setCell, type GridFormat } from '../state/scheme-grid';
import { tpMismatch, trainOptionsFor, type RunConfig } from '../worker/protocol';
import { FilePicker } from './FilePicker';
import { ComputeGrid, GemmDeviceNote } from './ComputeGrid';
import { useLab, useLabApi } from './context';
import { download, fileSlug } from './download';
import { formatBytes } from './format';
import { MemoryBar, MemoryLegend } from './MemoryBar';

const FP32_SCHEME = (): Scheme => SCHEME_PRESETS.fp32 ?? Object.values(SCHEME_PRESETS)[0];

/** The draft resolved once (the run's resolver: budget solved, buffers planned) and the fp32 run's memory beside it, or why it cannot be. */
function resolveDraft(draft: RunConfig): { plan: TrainingPlan; mem: MemReport; fp32: MemReport } | { error: string } {
  try {
    const plan = resolveTrainingPlan(trainOptionsFor(draft));
    return { plan, mem: plan.memory, fp32: planMemory(trainOptionsFor({ ...draft, scheme: undefined })) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

/** The compute formats' problem at this shape (the resolver's own message) and the GEMM path of each layer of the resolved draft on this device. */
function computeView(draft: RunConfig, plan: TrainingPlan | null, tensorCores: boolean): { problem: string | null; paths: ReturnType<typeof gemmPaths> } {
  try {
    const o = trainOptionsFor(draft);
    return { problem: computeProblem(o.model, o.batch, o.seq, o.scheme), paths: gemmPaths(plan?.model ?? null, tensorCores) };
  } catch {
    return { problem: null, paths: null }; // the form's own problem, said by the run form
  }
}

function Cell({ value, onChange, testId, title }: { value: string | null; onChange(f: GridFormat): void; testId: string; title: string }) {
  const known = value !== null && (GRID_FORMATS as readonly string[]).includes(value);
  return (
    <select className={`cell cell-${value ?? 'mixed'}`} data-testid={testId} title={title} aria-label={title} value={value ?? ''} onChange={(e) => onChange(e.target.value as GridFormat)}>
      {value === null && <option value="">mixed</option>}
      {value !== null && !known && <option value={value}>{value}</option>}
      {GRID_FORMATS.map((f) => (
        <option key={f} value={f}>{f}</option>
      ))}
    </select>
  );
}

/**
 * What a scheme does: a preset's own description while it is unedited, else a summary of its
 * saved-activation cells (so the text never describes what the grid no longer shows).
 */
function schemeDescription(scheme: Scheme, layers: number): string {
  const preset = SCHEME_PRESETS[scheme.name];
  if (preset && JSON.stringify(preset) === JSON.stringify(scheme) && scheme.description) return scheme.description;
  const counts = new Map<string, number>();
  for (let l = 0; l < layers; l++) for (const k of SAVED_KINDS) {
    const c = cellLabel(savedSpec(scheme, l, k));
    counts.set(c, (counts.get(c) ?? 0) + 1);
  }
  const cells = [...counts].map(([f, n]) => `${n} × ${f}`).join(', ');
  const base = scheme.name.replace(/-custom$/, '');
  const from = base !== scheme.name && SCHEME_PRESETS[base] ? `Edited from ${base}` : 'Custom scheme';
  const compute = new Map<string, number>();
  for (let l = 0; l < layers; l++) {
    const c = layerScheme(scheme, l).compute;
    const k = `${c.forward}/${c.dx}/${c.dw}${c.dw === 'int8' ? ` dW block ${c.dw_block}` : ''}${c.grad_rounding === 'stochastic' ? ' dY stochastic' : ''}`;
    compute.set(k, (compute.get(k) ?? 0) + 1);
  }
  const gemms = compute.has('fp32/fp32/fp32') && compute.size === 1 ? '' : `; GEMMs fwd/dX/dW ${[...compute].map(([f, n]) => `${n} × ${f}`).join(', ')} (of ${layers} layers)`;
  return `${from}: saved activations ${cells} (of ${layers * SAVED_KINDS.length} cells)${gemms}; gradients ${cellLabel(scheme.grads.storage)}, Adam moments ${cellLabel(scheme.adam.m)} / ${cellLabel(scheme.adam.v)}${scheme.tp.degree > 1 ? `, TP ${scheme.tp.degree} × ${scheme.tp.codec}` : ''}.`;
}

/**
 * The next run's scheme: a preset, or edited cell by cell (layer × saved activation kind), imported
 * or exported as JSON; the predicted memory per category follows every edit (the draft's resolved plan, no GPU).
 */
export function SchemeEditor() {
  const { store } = useLabApi();
  const draft = useLab((s) => s.draft);
  const stale = useLab((s) => s.draftProblem);
  const scheme = draft.scheme ?? FP32_SCHEME();
  const setScheme = (s: Scheme) => store.getState().setDraft({ scheme: s });
  const [jsonText, setJsonText] = useState<string | null>(null);
  const [jsonError, setJsonError] = useState<string | null>(null);
  const cfg = draft.model ?? PRESETS[draft.preset];
  const L = cfg.num_hidden_layers;
  const predicted = useMemo(() => resolveDraft(draft), [draft]);
  const resolved = 'plan' in predicted ? predicted.plan : null;
  const gpu = useLab((s) => s.gpu);
  const tensorCores = gpu.state === 'available' && !!gpu.i8TensorCores;
  const compute = useMemo(() => computeView(draft, resolved, tensorCores), [draft, resolved, tensorCores]);
  const bits = useMemo(() => savedBits(resolved?.model ?? null), [resolved]);
  const unsupported = unsupportedFeatures(scheme);
  const presetNames = Object.keys(SCHEME_PRESETS);
  // A TP degree must divide the model's heads (and more): say so, and offer the presets that fit.
  const shape = { model: cfg, batch: draft.batch, seq: draft.seq };
  const tp = tpMismatch(scheme, shape);

  const applyJson = (text: string) => {
    const r = parseSchemeText(text);
    if ('error' in r) {
      setJsonError(r.error);
      return;
    }
    setJsonError(null);
    setJsonText(null);
    setScheme(r.scheme);
  };

  return (
    <section className="scheme-editor" data-testid="scheme-editor" data-scheme={scheme.name}>
      <h2>Quantization scheme</h2>
      <div className="scheme-top">
        <label className="field">
          <span>Scheme</span>
          <select
            data-testid="scheme-preset"
            value={presetNames.includes(scheme.name) ? scheme.name : ''}
            onChange={(e) => {
              setJsonText(null);
              setJsonError(null);
              setScheme(SCHEME_PRESETS[e.target.value]);
            }}
          >
            {!presetNames.includes(scheme.name) && <option value="">{scheme.name} (edited)</option>}
            {presetNames.map((n) => (
              <option key={n} value={n}>
                {n}
                {tpMismatch(SCHEME_PRESETS[n], shape) ? ` (TP ${SCHEME_PRESETS[n].tp.degree} does not fit this model)` : ''}
              </option>
            ))}
          </select>
        </label>
        <label className="field">
          <span>Name</span>
          <input data-testid="scheme-name" value={scheme.name} maxLength={80} onChange={(e) => e.target.value && setScheme({ ...scheme, name: e.target.value })} />
        </label>
        <button type="button" data-testid="scheme-export" onClick={() => download(`scheme-${fileSlug(scheme.name)}.json`, JSON.stringify(scheme, null, 2) + '\n', 'application/json')}>
          Export JSON
        </button>
        <FilePicker testId="scheme-import" accept=".json,application/json"
          onFiles={async ([f]) => {
            if (f) {
              const text = await f.text();
              setJsonText(text);
              applyJson(text);
            }
          }}>
          Import JSON
        </FilePicker>
      </div>
      <p className="muted small" data-testid="scheme-description">{schemeDescription(scheme, L)}</p>

      <div className="grid-wrap">
        <table className="scheme-grid" data-testid="scheme-grid">
          <thead>
            <tr>
              <th>layer</th>
              {SAVED_KINDS.map((k) => (
                <th key={k} title={`${k}: ${SAVED_KIND_LABEL[k]}, as saved for the backward pass`} data-testid={`col-${k}`}>
                  <abbr title={`${k}: ${SAVED_KIND_LABEL[k]}, as saved for the backward pass`}>{k}</abbr>
                </th>
              ))}
            </tr>
          </thead>
          <tbody>
            <tr className="all-row">
              <th>all</th>
              {SAVED_KINDS.map((k) => (
                <td key={k}>
                  <Cell testId={`cell-all-${k}`} title={`${SAVED_KIND_LABEL[k]}, every layer`} value={commonCell(scheme, L, k)} onChange={(f) => setScheme(setCell(scheme, 'all', k, f))} />
                </td>
              ))}
            </tr>
            {Array.from({ length: L }, (_, l) => (
              <tr key={l}>
                <th>{l}</th>
                {SAVED_KINDS.map((k: SavedKind) => (
                  <td key={k}>
                    <Cell testId={`cell-${l}-${k}`} title={`${SAVED_KIND_LABEL[k]}, layer ${l}`} value={cellLabel(savedSpec(scheme, l, k))} onChange={(f) => setScheme(setCell(scheme, l, k, f))} />
                  </td>
                ))}
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <p className="muted small">
        int8 / int4: integer codes in groups of 128 with an fp32 scale per group, round to nearest. oproj_input shares attn_out&apos;s
        storage (the same tensor); head_input is the last layer&apos;s cell. Saved activations average{' '}
        <b data-testid="plan-bits">{bits ? bits.overall.toFixed(2) : '—'}</b> bits per element.
      </p>

      <ComputeGrid scheme={scheme} layers={L} paths={compute.paths} onChange={setScheme} />
      <GemmDeviceNote tensorCores={tensorCores} known={gpu.state === 'available'} refused={compute.problem !== null} />

      {compute.problem && (
        <pre className="error" role="alert" data-testid="scheme-compute-problem">{compute.problem}</pre>
      )}

      {tp && (
        <div className="error" role="alert" data-testid="scheme-tp-problem" data-alternatives={tp.alternatives.join(' ')}>
          <b>{scheme.name} cannot split this model {scheme.tp.degree} ways:</b> {tp.problem}.{' '}
          {tp.alternatives.length > 0 ? (
            <>
              Use{' '}
              {tp.alternatives.map((n) => (
                <button key={n} type="button" className="small" data-testid={`use-scheme-${n}`} onClick={() => setScheme(SCHEME_PRESETS[n])}>
                  {n}
                </button>
              ))}{' '}
              instead: the same {scheme.tp.codec} codec at a TP degree this model divides.
            </>
          ) : (
            'Set a TP degree that divides it (Edit as JSON), or change the batch × context.'
          )}
        </div>
      )}

      {unsupported.length > 0 && (
        <div className="error" role="alert" data-testid="scheme-unsupported">
          <b>This scheme cannot run yet.</b> The engine does not implement: {unsupported.join(', ')}. Start is disabled until
          those fields are fp32 / off.
        </div>
      )}

      <details className="scheme-json" open={jsonText !== null || jsonError !== null}>
        <summary>Edit as JSON</summary>
        <textarea
          data-testid="scheme-json"
          rows={8}
          spellCheck={false}
          value={jsonText ?? JSON.stringify(scheme, null, 2)}
          onChange={(e) => setJsonText(e.target.value)}
        />
        <div className="buttons">
          <button type="button" data-testid="scheme-apply" disabled={jsonText === null} onClick={() => jsonText !== null && applyJson(jsonText)}>
            Apply JSON
          </button>
          <button type="button" disabled={jsonText === null} onClick={() => { setJsonText(null); setJsonError(null); }}>
            Discard edits
          </button>
        </div>
        {jsonError && <pre className="error" data-testid="scheme-error">{jsonError}</pre>}
      </details>

      <div className={stale ? 'plan stale-plan' : 'plan'} data-testid="memory-plan" data-stale={stale ? 'true' : 'false'}>
        <h3>Predicted GPU memory of the next run</h3>
        {stale && (
          <p className="stale-note" data-testid="plan-stale">
            Stale: {stale}. These numbers are for the last valid settings, not for what the form shows now.
          </p>
        )}
        {'error' in predicted ? (
          <p className="form-problem" data-testid="plan-error">{predicted.error}</p>
        ) : (
          <div className={stale ? 'stale' : undefined}>
            <MemoryBar mem={predicted.mem} scale={Math.max(predicted.mem.total, predicted.fp32.total)} testId="plan-bar" label={`this scheme (${scheme.name})`} />
            <MemoryBar mem={predicted.fp32} scale={Math.max(predicted.mem.total, predicted.fp32.total)} testId="plan-bar-fp32" label="fp32 baseline" />
            <MemoryLegend />
            <p className="small">
              Total <b data-testid="plan-total" data-value={predicted.mem.total}>{formatBytes(predicted.mem.total)}</b> ({((predicted.mem.total / predicted.fp32.total) * 100).toFixed(1)} % of fp32); activations{' '}
              {formatBytes(predicted.mem.activations)}, workspace {formatBytes(predicted.mem.workspace)}.
            </p>
            {/* Said where the growth shows, not only in the collapsed notes below. */}
            {predicted.mem.workspace > predicted.fp32.workspace && (
              <p className="small" data-testid="plan-workspace-note">
                Workspace is {formatBytes(predicted.mem.workspace - predicted.fp32.workspace)} above fp32&apos;s: each quantized activation kind keeps
                one fp32 working copy, shared by all layers{predicted.mem.total > predicted.fp32.total ? ', which on this model costs more than its codes save' : ''}.
              </p>
            )}
            <details className="small" data-testid="plan-explain">
              <summary>What the categories are</summary>
              <ul className="plot-notes">
                <li><b>weights</b>: fp32 master weights (a quantized scheme keeps them, and adds its quantized copies).</li>
                <li><b>grads</b> and <b>optimizer</b>: one gradient and two Adam moments per weight.</li>
                <li><b>activations</b>: what the forward pass saves for the backward pass; the scheme&apos;s cells choose how each is stored.</li>
                <li>
                  <b>workspace</b>: buffers that live during a step but are not saved: logits and loss scratch, attention&apos;s raw Q/K, the
                  forward&apos;s transposed weights, gradient staging, and <i>one fp32 working copy per quantized activation kind</i>, shared by
                  all layers (the forward writes it before quantizing, the backward dequantizes into it). That copy is why quantizing the
                  first cell of a kind can raise the total: on a model with few layers it costs more than the codes save.
                </li>
                <li><b>comm</b>: send and receive buffers of a tensor-parallel exchange.</li>
              </ul>
            </details>
          </div>
        )}
      </div>
    </section>
  );
}
