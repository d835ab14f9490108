import { useState } from 'react';
import { Brush, CartesianGrid, Legend, Line, LineChart, ReferenceLine, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import { diffFromBaseline, type DiffMode, mergeSeries, sharedGpuRuns, smooth, type XKey } from '../state/compare';
import { pointsInBpb, type RunState } from '../state/runs';
import { useLab } from './context';
import { runColor } from './colors';
import { formatLoss, formatRate } from './format';
import { MemoryBar, MemoryLegend } from './MemoryBar';
import { BitsCompare, QuantErrorCompare, WireCompare } from './QuantPlots';

function useRuns(): RunState[] {
  const runs = useLab((s) => s.runs);
  const order = useLab((s) => s.runOrder);
  return order.map((id) => runs[id]).filter((r): r is RunState => r !== undefined);
}

/** How the loss charts are drawn: smoothing, and the run the others are shown against. */
interface View {
  smoothing: number;
  baseline: string | null;
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
  const withPoints = runs.map(inUnit).filter((r) => r.train.length > 0);
  const base = x === 'step' && view.baseline ? withPoints.find((r) => r.id === view.baseline) : undefined;
  const curve = (pts: RunState['train'] | RunState['val'], basePts: RunState['train'] | RunState['val'] | undefined) => {
    const sm = smooth(pts, view.smoothing);
    return base && basePts ? diffFromBaseline(sm, smooth(basePts, view.smoothing), view.diff) : sm;
  };
  const series = withPoints.flatMap((r) => [
    { key: `t:${r.id}`, points: curve(r.train, base?.train) },
    { key: `v:${r.id}`, points: curve(r.val, base?.val) },
  ]);
  const rows = mergeSeries(series, x);
  const fmtY = (v: number) => (base ? formatDiff(v, view.diff) : formatLoss(v));
  const fmtX = (v: number) => (x === 'step' ? `step ${v}` : `${Number(v).toFixed(1)} s`);
  const unitText = bpb ? 'bits per byte' : 'nats per token';
  const caption = `${base ? `${title.split(' (')[0]}: difference from ${base.label} (${view.diff === 'percent' ? '% of its loss' : 'absolute'})` : title}, ${unitText}`;
  return (
    <figure className="chart" data-testid={testId} data-runs={withPoints.length} data-baseline={base?.id ?? ''} data-unit={view.unit}>
      <figcaption>{caption}</figcaption>
      {withPoints.length === 0 ? (
        <p className="muted">Curves appear here after the first step of a run.</p>
      ) : (
        <ResponsiveContainer width="100%" height={290}>
          <LineChart data={rows} margin={{ top: 8, right: 36, bottom: 8, left: 8 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="x" type="number" domain={['dataMin', 'dataMax']} allowDecimals={x === 'elapsed_s'}
              tickFormatter={(v: number) => (x === 'step' ? String(v) : `${v.toFixed(0)} s`)} />
            <YAxis type="number" domain={['auto', 'auto']} tickFormatter={fmtY} width={base ? 80 : 60} tick={{ fontSize: 12 }} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? fmtY(v) : String(v))} labelFormatter={(v) => fmtX(Number(v))} />
            <Legend />
            {base && <ReferenceLine y={0} stroke="currentColor" strokeOpacity={0.5} />}
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

/** All runs overlaid: losses, memory, throughput, quantization error, bits per element and wire bytes. */
export function ComparePanel() {
  const runs = useRuns();
  const [open, setOpen] = useState(true);
  const [view, setView] = useState<View>({ smoothing: 0, baseline: null, diff: 'absolute', unit: 'nats' });
  if (runs.length === 0) return null;
  return (
    <section className="compare" data-testid="compare">
      <h2>
        Compare runs{' '}
        <button type="button" className="small" onClick={() => setOpen(!open)}>{open ? 'hide' : 'show'}</button>
      </h2>
      {open && <ViewControls runs={runs} view={view} setView={setView} />}
      {open && <SharedGpuNote runs={runs} />}
      {open && (
        <div className="compare-grid">
          <LossCompare runs={runs} x="step" testId="loss-vs-step" title="Loss vs step (solid: train, dashed: validation)" view={view} />
          <LossCompare runs={runs} x="elapsed_s" testId="loss-vs-time" title="Loss vs training time (pauses excluded)" view={{ ...view, baseline: null }} />
          <MemoryCompare runs={runs} />
          <ThroughputCompare runs={runs} />
          <QuantErrorCompare runs={runs} />
          <BitsCompare runs={runs} />
          <WireCompare runs={runs} />
        </div>
      )}
    </section>
  );
}
