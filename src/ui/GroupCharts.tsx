/**
 * Plots of this session's group runs, side by side so fp32 and compressed exchange compare: the
 * loss against wall-clock time beside a lone-member reference from the lab (group-reference.ts),
 * the exchange's bytes on the wire per step (with what fp32 would send for the same step, dashed)
 * and the time spent communicating against computing; plus a table of per-run averages (bytes per
 * trained token, the share of time waiting on the network).
 */
import { memo, type ReactNode, useEffect, useRef, useState } from 'react';
import { CartesianGrid, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import { type GroupRun, type GroupStepPoint, wireSummary } from '../state/group/group';
import { GROUP_MODES } from '../state/group/config';
import { loneReference, loneReferenceHint, lonePoints } from '../state/group/reference';
import type { RunState } from '../state/runs';
import { runColor } from './colors';
import { useLab } from './context';
import { formatBytes } from './format';

interface PlotProps {
  testId: string;
  title: string;
  runs: GroupRun[];
  children: ReactNode;
  yFormat(v: number): string;
  /** The x axis: the step index, or seconds since the run's first step. */
  x?: 'step' | 'elapsed_s';
  extra?: ReactNode;
}

function Plot({ testId, title, runs, children, yFormat, x = 'step', extra }: PlotProps) {
  return (
    <figure className="chart group-chart" data-testid={testId} data-runs={runs.length}>
      <figcaption>{title}</figcaption>
      <ResponsiveContainer width="100%" height={220}>
        <LineChart margin={{ top: 8, right: 16, bottom: 8, left: 8 }}>
          <CartesianGrid strokeDasharray="3 3" />
          <XAxis dataKey={x} type="number" domain={[x === 'step' ? 'dataMin' : 0, 'dataMax']} allowDecimals={x !== 'step'} tick={{ fontSize: 11 }}
            tickFormatter={x === 'step' ? undefined : (v: number) => `${Number(v.toFixed(1))} s`} />
          <YAxis type="number" domain={['auto', 'auto']} tickFormatter={yFormat} width={68} tick={{ fontSize: 11 }} />
          <Tooltip formatter={(v) => (typeof v === 'number' ? yFormat(v) : String(v))} labelFormatter={(v) => (x === 'step' ? `step ${v}` : `${Number(v).toFixed(1)} s`)} />
          {children}
        </LineChart>
      </ResponsiveContainer>
      {extra}
    </figure>
  );
}

/** Axis ticks: whole units, short enough not to wrap. */
function compactBytes(n: number): string {
  if (n < 1024) return `${Math.round(n)} B`;
  if (n < 1024 * 1024) return `${Math.round(n / 1024)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function compactMs(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

const isCompressed = (r: GroupRun) => GROUP_MODES[r.config.mode].exchange !== 'fp32';

/** Points drawn per run: a long run is thinned to every k-th step (the group trains on this thread; drawing must stay cheap). */
const MAX_DRAWN = 300;

function thinned<P>(points: P[]): P[] {
  if (points.length <= MAX_DRAWN) return points;
  const k = Math.ceil(points.length / MAX_DRAWN);
  return points.filter((_, i) => i % k === 0 || i === points.length - 1);
}

/**
 * How often the plots are redrawn while runs step. The group trains on this thread, and drawing
 * three recharts plots costs far more main-thread time than a micro step's own work, so the plots
 * follow the steps a little behind instead of on every one.
 */
const REDRAW_MS = 1500;

/** `value`, updated at most every `ms` (the latest value always arrives, at most `ms` late). */
function useThrottled<T>(value: T, ms: number): T {
  const [shown, setShown] = useState(value);
  const latest = useRef(value);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  latest.current = value;
  useEffect(() => {
    if (timer.current !== null || shown === value) return;
    timer.current = setTimeout(() => {
      timer.current = null;
      setShown(latest.current);
    }, ms);
  }, [value, shown, ms]);
  useEffect(() => () => {
    if (timer.current !== null) clearTimeout(timer.current);
  }, []);
  return shown;
}

export function GroupCharts({ runs }: { runs: GroupRun[] }) {
  const lab = useLab((s) => s.runs);
  return <DrawnCharts runs={useThrottled(runs, REDRAW_MS)} lab={useThrottled(lab, REDRAW_MS)} />;
}

/** Re-drawn only when a run's points (or the lab's runs) change, not on every phase or roster update. */
const DrawnCharts = memo(Charts, (a, b) => a.lab === b.lab && a.runs.length === b.runs.length && a.runs.every((r, i) => r.points === b.runs[i].points && r.label === b.runs[i].label));

type DrawnPoint = GroupStepPoint & { elapsed_s: number };

function Charts({ runs, lab }: { runs: GroupRun[]; lab: Record<string, RunState> }) {
  const shown = runs.filter((r) => r.points.length > 0);
  if (shown.length === 0) return <p className="muted small">Plots (loss against time, bytes on the wire, communication against compute) appear after the first step.</p>;
  const color = (r: GroupRun) => runColor(runs.indexOf(r));
  const drawn = new Map(shown.map((r) => [r, thinned(r.points).map((p): DrawnPoint => ({ ...p, elapsed_s: p.elapsedMs / 1000 }))]));
  const line = (r: GroupRun, key: string, name: string, dashed = false) => (
    <Line key={`${r.id}-${key}`} data={drawn.get(r)} dataKey={key} name={`${r.label} ${name}`.trim()} stroke={color(r)}
      strokeDasharray={dashed ? '5 4' : undefined} dot={false} isAnimationActive={false} connectNulls />
  );
  const labRuns = Object.values(lab);
  const refs = shown.map((r) => ({ run: r, ref: loneReference(r.config, labRuns) }));
  // One line per lab run, however many group runs it is the reference of; dotted, in its group run's colour.
  const refLines = [...new Map(refs.filter((x) => x.ref).map((x) => [x.ref!.id, x])).values()].map(({ run, ref }) => (
    <Line key={`alone-${ref!.id}`} data={thinned(lonePoints(ref!))} dataKey="loss" name={`alone: ${ref!.label}`} stroke={color(run)}
      strokeDasharray="2 3" strokeOpacity={0.8} dot={false} isAnimationActive={false} />
  ));
  const found = refs.filter((x) => x.ref);
  // Runs without a reference, grouped by what to train for one (several runs of one model share it).
  const missing = new Map<string, GroupRun[]>();
  for (const { run, ref } of refs) if (!ref) missing.set(loneReferenceHint(run.config), [...(missing.get(loneReferenceHint(run.config)) ?? []), run]);
  const refNote = (
    <div className="muted small" data-testid="group-reference" data-found={found.length} data-missing={refs.length - found.length}>
      {[...new Set(found.map((x) => x.ref!))].map((ref) => (
        <p key={ref.id} data-testid="group-reference-found">Dotted: alone: {ref.label} (the same model trained alone in the lab, against its own training time).</p>
      ))}
      {[...missing].map(([hint, rs]) => <p key={hint}>No lone-member reference for {rs.map((r) => r.label).join(', ')}: {hint}.</p>)}
    </div>
  );
  return (
    <div className="group-charts" data-testid="group-charts">
      <div className="compare-grid">
        <Plot testId="group-chart-loss" title="Loss of the step's batch against wall-clock time since the first step" runs={shown} yFormat={(v) => v.toFixed(3)} x="elapsed_s" extra={refNote}>
          {shown.map((r) => line(r, 'loss', ''))}
          {refLines}
        </Plot>
        <Plot testId="group-chart-bytes" title="Exchange bytes sent per step by this member (dashed: fp32 for the same step)" runs={shown} yFormat={compactBytes}>
          {shown.flatMap((r) => [line(r, 'wireBytes', 'sent'), isCompressed(r) && line(r, 'fp32WireBytes', 'fp32 equivalent', true)])}
        </Plot>
        <Plot testId="group-chart-time" title="Time per step: computing (solid) and communicating (dashed)" runs={shown} yFormat={compactMs}>
          {shown.flatMap((r) => [line(r, 'computeMs', 'compute'), line(r, 'commMs', 'comm', true)])}
        </Plot>
        <RunTable runs={shown} color={color} />
      </div>
    </div>
  );
}

function RunTable({ runs, color }: { runs: GroupRun[]; color(r: GroupRun): string }) {
  return (
    <table className="group-summary" data-testid="group-summary" tabIndex={0}>
      <caption>Per run on this member (colours as in the plots)</caption>
      <thead>
        <tr><th>run</th><th>steps</th><th>step time</th><th title="share of the step time spent waiting on the network (communication / step time)">network wait</th><th>exchange / step</th><th title="exchange bytes this member sent / tokens the group trained">bytes / token</th><th>vs fp32</th></tr>
      </thead>
      <tbody>
        {runs.map((r) => {
          const w = wireSummary(r.points);
          const ms = r.points.reduce((a, p) => a + p.stepMs, 0) / r.points.length;
          return (
            <tr key={r.id} data-testid="group-summary-row" data-run-id={r.id} data-mode={r.config.mode} data-wire={w.wire} data-fp32={w.fp32} data-ratio={w.ratio ?? ''}
              data-bytes-per-token={w.bytesPerToken ?? ''} data-comm-share={w.commShare ?? ''}>
              <td><i className="swatch" style={{ background: color(r) }} /> {r.label}</td>
              <td>{w.steps}</td>
              <td>{ms.toFixed(0)} ms</td>
              <td>{w.commShare === null ? '–' : `${Math.round(100 * w.commShare)}%`}</td>
              <td>{w.steps ? formatBytes(Math.round(w.wire / Math.max(1, r.points.filter((p) => p.fp32WireBytes > 0).length))) : '–'}</td>
              <td>{w.bytesPerToken === null ? '–' : `${w.bytesPerToken < 10 ? w.bytesPerToken.toFixed(2) : Math.round(w.bytesPerToken)} B`}</td>
              <td>{w.ratio === null ? '–' : `${(100 * w.ratio).toFixed(1)}%`}</td>
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
