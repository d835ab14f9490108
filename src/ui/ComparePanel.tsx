import { useState } from 'react';
import { Brush, CartesianGrid, Legend, Line, LineChart, ReferenceLine, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import {
  BASELINE_CHOICES, type BaselineChoice, type BaselineKind, type BaselineRow, baselineRows, deviceRunsF16, f16BaselineCaveat, findBaseline, resolveBaseline,
} from '../state/baseline';
import { diffFromBaseline, type DiffMode, mergeSeries, sharedGpuRuns, smooth, type XKey } from '../state/compare';
import { submitRun } from '../state/queue';
import type { MemReport } from '../engine/gpu/memory';
import { pointsInBpb, runPlannedMemory, type RunState } from '../state/runs';
import { BUNDLED_DATASET, type RunConfig } from '../worker/protocol';
import { useLab, useLabApi } from './context';
import { runColor } from './colors';
import { formatLoss, formatRate } from './format';
import { MemoryBar, MemoryLegend } from './MemoryBar';
import { BitsCompare, QuantErrorCompare, WireCompare } from './QuantPlots';

function useRuns(): RunState[] {
  const runs = useLab((s) => s.runs);
  const order = useLab((s) => s.runOrder);
  return order.map((id) => runs[id]).filter((r): r is RunState => r !== undefined);
}

/** "Difference from" each run's own baseline run (the lab's baseline setting), rather than one run. */
const PER_RUN_BASELINE = '@baseline';

/** How the loss charts are drawn: smoothing, and the run the others are shown against. */
interface View {
  smoothing: number;
  /** A run's id, PER_RUN_BASELINE, or null (plain loss). */
  baseline: string | null;
  /** The baseline setting, resolved (fp32 or f16): what PER_RUN_BASELINE means. */
  kind: BaselineKind;
  diff: DiffMode;
  /** Loss in nats per token, or in bits per byte of the text (character and BPE runs compare). */
  unit: 'nats' | 'bpb';
}

const signed = (v: number, digits: number) => `${v > 0 ? '+' : v < 0 ? '−' : ''}${Math.abs(v).toFixed(digits)}`;
// A no-break space keeps "%" on the tick's line; three decimals show a 0.001 % step.
const formatDiff = (v: number, mode: DiffMode) => (mode === 'percent' ? `${signed(v, 3)}\u00a0%` : signed(v, 4));

/**
 * Train (solid) and validation (dashed, dots) loss of every run against step or training time,
 * smoothed; against step, optionally as the difference from a baseline run. A brush under the
 * chart zooms into an x range.
 */
function LossCompare({ runs, x, testId, title, view }: { runs: RunState[]; x: XKey; testId: string; title: string; view: View }) {
  const bpb = view.unit === 'bpb';
  // In bits per byte, a run whose text's bytes the page does not know has no curve.
  const inUnit = (r: RunState): RunState => (bpb ? { ...r, train: pointsInBpb(r, r.train, 'train'), val: pointsInBpb(r, r.val, 'val') } : r);
  const all = runs.map(inUnit).filter((r) => r.train.length > 0);
  const perRun = x === 'step' && view.baseline === PER_RUN_BASELINE;
  const single = x === 'step' && view.baseline && !perRun ? all.find((r) => r.id === view.baseline) : undefined;
  // Against each run's own baseline: a run without one (the baseline runs themselves among them) has no curve.
  const baseOf = (r: RunState): RunState | undefined => (perRun ? findBaseline(r, all, view.kind) ?? undefined : single);
  const withPoints = perRun ? all.filter((r) => baseOf(r)) : all;
  const diffing = perRun || single !== undefined;
  const curve = (pts: RunState['train'] | RunState['val'], basePts: RunState['train'] | RunState['val'] | undefined) => {
    const sm = smooth(pts, view.smoothing);
    return diffing && basePts ? diffFromBaseline(sm, smooth(basePts, view.smoothing), view.diff) : sm;
  };
  const series = withPoints.flatMap((r) => [
    { key: `t:${r.id}`, points: curve(r.train, baseOf(r)?.train) },
    { key: `v:${r.id}`, points: curve(r.val, baseOf(r)?.val) },
  ]);
  const rows = mergeSeries(series, x);
  const fmtY = (v: number) => (diffing ? formatDiff(v, view.diff) : formatLoss(v));
  const fmtX = (v: number) => (x === 'step' ? `step ${v}` : `${Number(v).toFixed(1)} s`);
  const unitText = bpb ? 'bits per byte' : 'nats per token';
  const against = perRun ? `each run's ${view.kind} baseline (the same run under ${view.kind}; runs without one are left out)` : single?.label;
  const caption = `${diffing ? `${title.split(' (')[0]}: difference from ${against} (${view.diff === 'percent' ? '% of its loss' : 'absolute'})` : title}, ${unitText}`;
  return (
    <figure className="chart" data-testid={testId} data-runs={withPoints.length} data-baseline={perRun ? PER_RUN_BASELINE : single?.id ?? ''} data-unit={view.unit}>
      <figcaption>{caption}</figcaption>
      {withPoints.length === 0 ? (
        <p className="muted">Curves appear here after the first step of a run.</p>
      ) : (
        <ResponsiveContainer width="100%" height={290}>
          <LineChart data={rows} margin={{ top: 8, right: 36, bottom: 8, left: 8 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="x" type="number" domain={['dataMin', 'dataMax']} allowDecimals={x === 'elapsed_s'}
              tickFormatter={(v: number) => (x === 'step' ? String(v) : `${v.toFixed(0)} s`)} />
            <YAxis type="number" domain={['auto', 'auto']} tickFormatter={fmtY} width={diffing ? 80 : 60} tick={{ fontSize: 12 }} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? fmtY(v) : String(v))} labelFormatter={(v) => fmtX(Number(v))} />
            <Legend />
            {diffing && <ReferenceLine y={0} stroke="currentColor" strokeOpacity={0.5} />}
            {withPoints.map((r) => {
              const color = runColor(runs.findIndex((q) => q.id === r.id));
              return [
                <Line key={`${r.id}-t`} dataKey={`t:${r.id}`} name={`${r.label} (train)`} stroke={color} dot={false} connectNulls isAnimationActive={false} />,
                r.val.length > 0 && (
                  <Line key={`${r.id}-v`} dataKey={`v:${r.id}`} name={`${r.label} (val)`} stroke={color} strokeDasharray="5 4" dot={{ r: 3 }} connectNulls isAnimationActive={false} />
                ),
              ];
            })}
            {/* See-through, so dark mode keeps its background; the right margin leaves room for the end label. */}
            {rows.length > 2 && <Brush dataKey="x" height={18} travellerWidth={8} fill="transparent" stroke="#9ca3af" tickFormatter={(v: number) => (x === 'step' ? String(v) : `${Number(v).toFixed(0)} s`)} />}
          </LineChart>
        </ResponsiveContainer>
      )}
    </figure>
  );
}

function ThroughputCompare({ runs }: { runs: RunState[] }) {
  const withPoints = runs.filter((r) => r.train.some((p) => p.tokens_per_s !== undefined));
  const rows = mergeSeries(withPoints.map((r) => ({ key: r.id, points: r.train.map((p) => ({ step: p.step, loss: p.tokens_per_s ?? NaN })) })), 'step');
  return (
    <figure className="chart" data-testid="tokens-chart" data-runs={withPoints.length}>
      <figcaption>Tokens per second (per step)</figcaption>
      {withPoints.length === 0 ? (
        <p className="muted">Throughput appears here after the first step of a run.</p>
      ) : (
        <ResponsiveContainer width="100%" height={230}>
          <LineChart data={rows} margin={{ top: 8, right: 16, bottom: 8, left: 8 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="x" type="number" domain={['dataMin', 'dataMax']} allowDecimals={false} />
            <YAxis type="number" width={56} tickFormatter={(v: number) => formatRate(v)} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? formatRate(v) : String(v))} labelFormatter={(v) => `step ${v}`} />
            <Legend />
            {withPoints.map((r) => (
              <Line key={r.id} dataKey={r.id} name={r.label} stroke={runColor(runs.indexOf(r))} dot={false} connectNulls isAnimationActive={false} />
            ))}
          </LineChart>
        </ResponsiveContainer>
      )}
    </figure>
  );
}

/** Said beside the time and throughput charts when runs trained at once: they waited for each other. */
function SharedGpuNote({ runs }: { runs: RunState[] }) {
  const shared = sharedGpuRuns(runs, Date.now());
  if (shared.length < 2) return null;
  const labels = shared.map((id) => runs.find((r) => r.id === id)?.label).join(', ');
  return (
    <p className="notice warn small" data-testid="shared-gpu-note" data-runs={shared.length}>
      {shared.length} runs trained at the same time on one GPU ({labels}): their training time and tokens/s include waiting for each other.
      To compare them fairly, tick &ldquo;one run at a time&rdquo; before Start.
    </p>
  );
}

function ViewControls({ runs, view, setView }: { runs: RunState[]; view: View; setView: (v: View) => void }) {
  return (
    <div className="compare-controls" data-testid="compare-controls">
      <label className="field">
        <span>Loss in</span>
        <select data-testid="compare-unit" value={view.unit} onChange={(e) => setView({ ...view, unit: e.target.value as View['unit'] })}>
          <option value="nats">nats per token</option>
          <option value="bpb">bits per byte (compares tokenizers)</option>
        </select>
      </label>
      <label className="field">
        <span>Difference from</span>
        <select data-testid="compare-baseline" value={view.baseline ?? ''} onChange={(e) => setView({ ...view, baseline: e.target.value || null })}>
          <option value="">none (plain loss)</option>
          <option value={PER_RUN_BASELINE}>each run&apos;s {view.kind} baseline</option>
          {runs.filter((r) => r.train.length > 0).map((r) => <option key={r.id} value={r.id}>{r.label}</option>)}
        </select>
      </label>
      <label className="field">
        <span>as</span>
        <select data-testid="compare-diff-mode" value={view.diff} disabled={!view.baseline} onChange={(e) => setView({ ...view, diff: e.target.value as DiffMode })}>
          <option value="absolute">absolute (loss − baseline)</option>
          <option value="percent">% of the baseline&apos;s loss</option>
        </select>
      </label>
      <label className="field">
        <span>Smoothing {view.smoothing.toFixed(2)}</span>
        <input type="range" data-testid="compare-smoothing" min={0} max={0.95} step={0.05} value={view.smoothing}
          onChange={(e) => setView({ ...view, smoothing: Number(e.target.value) })} />
      </label>
    </div>
  );
}

const CHOICE_TEXT: Record<BaselineChoice, string> = { auto: 'auto', fp32: 'fp32', f16: 'f16 mixed precision' };
const signedPct = (v: number | null, digits = 1) => (v === null ? '–' : `${signed(v, digits)}\u00a0%`);

/** Where a missing baseline's text comes from: none (bundled or prepared data), the form's picked file of that name, or nowhere. */
function baselineText(row: BaselineRow, draftText: { name: string; text: string } | null): { text?: string } | null {
  const c = row.missing!.config;
  if (c.dataset === BUNDLED_DATASET || c.data) return {};
  return draftText?.name === c.dataset ? { text: draftText.text } : null;
}

/**
 * Every run against its baseline — the same run under fp32 or f16 mixed precision (the lab's
 * baseline setting, auto: f16 where the device has shader-f16) — in loss, memory and speed; a
 * missing baseline can be started from here.
 */
function BaselineTable({ runs }: { runs: RunState[] }) {
  const { store, runs: controller } = useLabApi();
  const choice = useLab((s) => s.baseline);
  const gpu = useLab((s) => s.gpu);
  const queued = useLab((s) => s.queued);
  const draftText = useLab((s) => s.draftText);
  const kind = resolveBaseline(choice, gpu);
  const rows = baselineRows(runs, kind, queued.map((q) => q.config));
  const caveat = f16BaselineCaveat(kind, gpu);
  const offered = new Set<string>();
  return (
    <div className="baseline" data-testid="baseline" data-kind={kind} data-choice={choice}>
      <label className="field">
        <span>Baseline</span>
        <select data-testid="baseline-choice" value={choice} onChange={(e) => store.getState().setBaseline(e.target.value as BaselineChoice)}>
          {BASELINE_CHOICES.map((c) => (
            <option key={c} value={c}>{c === 'auto' ? `auto (${deviceRunsF16(gpu) ? 'f16: this GPU has shader-f16' : 'fp32: no shader-f16 here'})` : CHOICE_TEXT[c]}</option>
          ))}
        </select>
      </label>
      {caveat && <p className="notice warn small" data-testid="baseline-twin-note">f16 baseline: {caveat}</p>}
      {rows.length > 0 && (
        <table className="plot-table baseline-table" data-testid="baseline-table" data-kind={kind} tabIndex={0}>
          <caption>
            Against the {kind} baseline: the same model, data, batch, context, learning rate and seed trained under {kind === 'f16' ? 'f16 mixed precision (preset f16)' : 'fp32'}
          </caption>
          <thead>
            <tr><th>run</th><th>{kind} baseline</th><th title="validation loss at the last step both evaluated, else the mean train loss of the last 10 common steps">loss vs {kind}</th><th>memory vs {kind}</th><th>tokens/s vs {kind}</th></tr>
          </thead>
          <tbody>
            {rows.map((row) => {
              const d = row.delta;
              const source = row.missing ? baselineText(row, draftText) : null;
              // Runs sharing one missing baseline: the button on the first row only, so it starts once.
              const first = row.missing !== null && !offered.has(row.missing.key);
              if (row.missing) offered.add(row.missing.key);
              return (
                <tr key={row.run.id} data-testid="baseline-row" data-run-id={row.run.id} data-base-id={row.base?.id ?? ''}
                  data-loss-pct={d?.lossPct ?? ''} data-memory-pct={d?.memoryPct ?? ''} data-speed-ratio={d?.speedRatio ?? ''}>
                  <td>{row.run.label}</td>
                  <td>
                    {row.base ? row.base.label : row.missing ? (
                      source && first ? (
                        <button type="button" className="small" data-testid="start-baseline"
                          onClick={() => submitRun(store, controller, row.missing!.config, source.text)}>
                          start the {kind} run
                        </button>
                      ) : source ? 'none yet (button above)' : `none yet: pick ${row.missing.config.dataset} in the form to start it`
                    ) : 'queued'}
                  </td>
                  <td>{d && d.lossPct !== null ? `${signedPct(d.lossPct, 2)} (${d.lossOn} @ ${d.lossStep})` : '–'}</td>
                  <td>{signedPct(d?.memoryPct ?? null)}</td>
                  <td>{d && d.speedRatio !== null ? `${d.speedRatio.toFixed(2)}×` : '–'}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </div>
  );
}

/** GPU memory per category, one stacked bar per run (measured: the run's allocation ledger). */
function MemoryCompare({ runs }: { runs: RunState[] }) {
  const withMem = runs.map((r) => ({ r, mem: r.latest?.mem ?? r.info?.memory ?? null })).filter((x) => x.mem !== null);
  const scale = Math.max(0, ...withMem.map((x) => x.mem!.total));
  return (
    <figure className="chart bars" data-testid="memory-compare">
      <figcaption>GPU memory per category (measured allocations)</figcaption>
      {withMem.length === 0 ? (
        <p className="muted">Bars appear once a run has built its model.</p>
      ) : (
        <>
          {withMem.map(({ r, mem }) => (
            <MemoryBar key={r.id} mem={mem!} scale={scale} testId={`mem-bars-${r.id}`} label={r.label} />
          ))}
          <MemoryLegend />
        </>
      )}
    </figure>
  );
}

// A run's config never changes: its plan is resolved once, not on every metrics message.
const plans = new WeakMap<RunConfig, MemReport | null>();
function plannedOf(c: RunConfig): MemReport | null {
  if (!plans.has(c)) plans.set(c, runPlannedMemory(c));
  return plans.get(c)!;
}

/**
 * The memory the plan predicts per category, one bar per run (from the config, so before a run has
 * built anything): fine-tuning schemes side by side, a LoRA run's frozen base without grads or moments.
 */
function PlannedMemoryCompare({ runs }: { runs: RunState[] }) {
  const planned = runs.map((r) => ({ r, mem: plannedOf(r.config) })).filter((x) => x.mem !== null);
  if (planned.length === 0) return null;
  const scale = Math.max(0, ...planned.map((x) => x.mem!.total));
  return (
    <figure className="chart bars" data-testid="planned-memory-compare">
      <figcaption>GPU memory per category (predicted by the plan)</figcaption>
      {planned.map(({ r, mem }) => (
        <MemoryBar key={r.id} mem={mem!} scale={scale} testId={`mem-plan-${r.id}`} label={r.label} />
      ))}
      <MemoryLegend />
    </figure>
  );
}

/** All runs overlaid: losses, memory, throughput, quantization error, bits per element and wire bytes. */
export function ComparePanel() {
  const runs = useRuns();
  const [open, setOpen] = useState(true);
  const [local, setView] = useState<Omit<View, 'kind'>>({ smoothing: 0, baseline: null, diff: 'absolute', unit: 'nats' });
  const kind = resolveBaseline(useLab((s) => s.baseline), useLab((s) => s.gpu));
  const view: View = { ...local, kind };
  if (runs.length === 0) return null;
  return (
    <section className="compare" data-testid="compare">
      <h2>
        Compare runs{' '}
        <button type="button" className="small" onClick={() => setOpen(!open)}>{open ? 'hide' : 'show'}</button>
      </h2>
      {open && <ViewControls runs={runs} view={view} setView={setView} />}
      {open && <SharedGpuNote runs={runs} />}
      {open && <BaselineTable runs={runs} />}
      {open && (
        <div className="compare-grid">
          <LossCompare runs={runs} x="step" testId="loss-vs-step" title="Loss vs step (solid: train, dashed: validation)" view={view} />
          <LossCompare runs={runs} x="elapsed_s" testId="loss-vs-time" title="Loss vs training time (pauses excluded)" view={{ ...view, baseline: null }} />
          <MemoryCompare runs={runs} />
          <PlannedMemoryCompare runs={runs} />
          <ThroughputCompare runs={runs} />
          <QuantErrorCompare runs={runs} />
          <BitsCompare runs={runs} />
          <WireCompare runs={runs} />
        </div>
      )}
    </section>
  );
}
