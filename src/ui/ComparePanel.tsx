import { useState } from 'react';
import { CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import type { RunState } from '../state/runs';
import { useLab } from './context';
import { runColor } from './colors';
import { formatRate } from './format';
import { MemoryBar, MemoryLegend } from './MemoryBar';
import { BitsCompare, QuantErrorCompare, WireCompare } from './QuantPlots';

type XKey = 'step' | 'elapsed_s';

function useRuns(): RunState[] {
  const runs = useLab((s) => s.runs);
  const order = useLab((s) => s.runOrder);
  return order.map((id) => runs[id]).filter((r): r is RunState => r !== undefined);
}

/** Train (solid) and validation (dashed, dots) loss of every run against step or training time. */
function LossCompare({ runs, x, testId, title }: { runs: RunState[]; x: XKey; testId: string; title: string }) {
  const withPoints = runs.filter((r) => r.train.length > 0);
  return (
    <figure className="chart" data-testid={testId} data-runs={withPoints.length}>
      <figcaption>{title}</figcaption>
      {withPoints.length === 0 ? (
        <p className="muted">Curves appear here after the first step of a run.</p>
      ) : (
        <ResponsiveContainer width="100%" height={260}>
          <LineChart margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey={x} type="number" domain={['dataMin', 'dataMax']} allowDecimals={x === 'elapsed_s'}
              tickFormatter={(v: number) => (x === 'step' ? String(v) : `${v.toFixed(0)} s`)} />
            <YAxis type="number" domain={['auto', 'auto']} tickFormatter={(v: number) => v.toFixed(2)} width={48} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? v.toFixed(4) : String(v))} labelFormatter={(v) => (x === 'step' ? `step ${v}` : `${Number(v).toFixed(1)} s`)} />
            <Legend />
            {withPoints.map((r) => {
              const color = runColor(runs.indexOf(r));
              return [
                <Line key={`${r.id}-t`} data={r.train} dataKey="loss" name={`${r.label} (train)`} stroke={color} dot={false} isAnimationActive={false} />,
                r.val.length > 0 && (
                  <Line key={`${r.id}-v`} data={r.val} dataKey="loss" name={`${r.label} (val)`} stroke={color} strokeDasharray="5 4" dot={{ r: 3 }} isAnimationActive={false} />
                ),
              ];
            })}
          </LineChart>
        </ResponsiveContainer>
      )}
    </figure>
  );
}

function ThroughputCompare({ runs }: { runs: RunState[] }) {
  const withPoints = runs.filter((r) => r.train.some((p) => p.tokens_per_s !== undefined));
  return (
    <figure className="chart" data-testid="tokens-chart" data-runs={withPoints.length}>
      <figcaption>Tokens per second (per step)</figcaption>
      {withPoints.length === 0 ? (
        <p className="muted">Throughput appears here after the first step of a run.</p>
      ) : (
        <ResponsiveContainer width="100%" height={200}>
          <LineChart margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="step" type="number" domain={['dataMin', 'dataMax']} allowDecimals={false} />
            <YAxis type="number" width={56} tickFormatter={(v: number) => formatRate(v)} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? formatRate(v) : String(v))} />
            {withPoints.map((r) => (
              <Line key={r.id} data={r.train} dataKey="tokens_per_s" name={r.label} stroke={runColor(runs.indexOf(r))} dot={false} isAnimationActive={false} />
            ))}
          </LineChart>
        </ResponsiveContainer>
      )}
    </figure>
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
  if (runs.length === 0) return null;
  return (
    <section className="compare" data-testid="compare">
      <h2>
        Compare runs{' '}
        <button type="button" className="small" onClick={() => setOpen(!open)}>{open ? 'hide' : 'show'}</button>
      </h2>
      {open && (
        <div className="compare-grid">
          <LossCompare runs={runs} x="step" testId="loss-vs-step" title="Loss vs step (solid: train, dashed: validation)" />
          <LossCompare runs={runs} x="elapsed_s" testId="loss-vs-time" title="Loss vs training time (pauses excluded)" />
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
