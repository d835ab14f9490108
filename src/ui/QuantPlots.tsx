/**
 * The comparison plots of what quantization costs and saves beside the loss: the measured
 * quantization error per layer, and the bits per element and wire bytes each scheme implies
 * (exact counts from the scheme and the model's dimensions, labelled as such).
 */
import { Bar, BarChart, CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import { tpActive } from '../engine/model/tp/tp';
import { isFp32, type Scheme } from '../engine/scheme/scheme';
import { PROBE_KINDS, type QuantErrorRecord } from '../engine/train/probe';
import { runAccounting, type RunState } from '../state/runs';
import { runColor } from './colors';
import { formatBytes } from './format';

type Props = { runs: RunState[] };

const colorOf = (runs: RunState[], r: RunState) => runColor(runs.indexOf(r));
const fmtErr = (v: number) => (v >= 0.01 ? v.toFixed(3) : v.toExponential(2));

/** Why a run has no error measurements: what its scheme quantizes that the probe does not reach. */
function unmeasuredReason(s: Scheme | undefined): string {
  const notProbed: string[] = [];
  if (tpActive(s)) notProbed.push(`its TP all-reduce compression (${s.tp.codec})`);
  if (s && !isFp32(s.grads.storage)) notProbed.push('gradient storage');
  if (s && (!isFp32(s.adam.m) || !isFp32(s.adam.v))) notProbed.push('Adam moments');
  if (s && [s.layer, ...Object.values(s.layers)].some((l) => l.gemm_output_grads && !isFp32(l.gemm_output_grads))) notProbed.push('output gradients');
  return notProbed.length ? `not measured: ${notProbed.join(', ')}` : 'nothing quantized in the forward pass';
}

/** Decade bounds around positive values, for a log axis. */
function logDomain(values: number[]): [number, number] {
  const pos = values.filter((v) => v > 0 && Number.isFinite(v));
  if (pos.length === 0) return [1e-4, 1];
  return [10 ** Math.floor(Math.log10(Math.min(...pos))), 10 ** Math.ceil(Math.log10(Math.max(...pos)))];
}

/**
 * ‖x − x̂‖/‖x‖ per layer and tensor kind at each run's latest evaluation (bars, log scale), and its
 * mean over the run's tensors against step (lines). Measured on the GPU on evaluation steps.
 */
export function QuantErrorCompare({ runs }: Props) {
  const measured = runs.filter((r) => r.quant.length > 0);
  const cats = new Map<string, QuantErrorRecord>();
  for (const r of measured) for (const e of r.quant.at(-1)!.errors) cats.set(`L${e.layer} ${e.kind}`, e);
  const order = [...cats.entries()].sort(([, a], [, b]) => a.layer - b.layer || PROBE_KINDS.indexOf(a.kind) - PROBE_KINDS.indexOf(b.kind));
  const rows = order.map(([cat]) => {
    const row: Record<string, number | string> = { cat };
    for (const r of measured) {
      const e = r.quant.at(-1)!.errors.find((x) => `L${x.layer} ${x.kind}` === cat);
      if (e && e.rel_err > 0) row[r.id] = e.rel_err;
    }
    return row;
  });
  const domain = logDomain(measured.flatMap((r) => r.quant.flatMap((q) => q.errors.map((e) => e.rel_err))));
  const mean = (q: RunState['quant'][number]) => q.errors.reduce((s, e) => s + e.rel_err, 0) / q.errors.length;
  return (
    <figure className="chart" data-testid="quant-error" data-runs={measured.length}>
      <figcaption>Quantization error per layer: ‖x − x̂‖ / ‖x‖ (measured on the GPU at each evaluation)</figcaption>
      {measured.length === 0 ? (
        <p className="muted">
          Appears after the first evaluation of a run that quantizes tensors in its forward pass (AGoQ&apos;s stored activations, the
          study&apos;s weights and GEMM inputs).
        </p>
      ) : (
        <>
          <ResponsiveContainer width="100%" height={220}>
            <BarChart data={rows} margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
              <CartesianGrid strokeDasharray="3 3" />
              <XAxis dataKey="cat" interval={0} angle={-30} textAnchor="end" height={60} tick={{ fontSize: 10 }} />
              <YAxis scale="log" domain={domain} allowDataOverflow tickFormatter={fmtErr} width={56} />
              <Tooltip formatter={(v) => (typeof v === 'number' ? fmtErr(v) : String(v))} />
              <Legend />
              {measured.map((r) => (
                <Bar key={r.id} dataKey={r.id} name={`${r.label} (step ${r.quant.at(-1)!.step + 1})`} fill={colorOf(runs, r)} isAnimationActive={false} />
              ))}
            </BarChart>
          </ResponsiveContainer>
          {measured.some((r) => r.quant.length > 1) && (
            <ResponsiveContainer width="100%" height={140}>
              <LineChart margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
                <CartesianGrid strokeDasharray="3 3" />
                <XAxis dataKey="step" type="number" domain={['dataMin', 'dataMax']} allowDecimals={false} tickFormatter={(v: number) => String(v + 1)} />
                <YAxis scale="log" domain={domain} allowDataOverflow tickFormatter={fmtErr} width={56} />
                <Tooltip formatter={(v) => (typeof v === 'number' ? fmtErr(v) : String(v))} labelFormatter={(v) => `after step ${Number(v) + 1}`} />
                {measured.map((r) => (
                  <Line key={r.id} data={r.quant.map((q) => ({ step: q.step, err: mean(q) }))} dataKey="err" name={`${r.label}: mean over tensors`}
                    stroke={colorOf(runs, r)} isAnimationActive={false} />
                ))}
              </LineChart>
            </ResponsiveContainer>
          )}
        </>
      )}
      <ul className="small plot-notes">
        {runs.map((r) => {
          const last = r.quant.at(-1);
          if (!last) {
            return <li key={r.id} data-testid={`qerr-${r.id}`} data-count={0}>{r.label}: {unmeasuredReason(r.config.scheme)}</li>;
          }
          const errs = last.errors.map((e) => e.rel_err);
          const min = Math.min(...errs);
          const max = Math.max(...errs);
          return (
            <li key={r.id} data-testid={`qerr-${r.id}`} data-count={errs.length} data-min={min} data-max={max} data-step={last.step}>
              {r.label}: {fmtErr(min)} – {fmtErr(max)} over {errs.length} (layer, kind) after step {last.step + 1}
            </li>
          );
        })}
      </ul>
    </figure>
  );
}

/** Saved-activation bits per element per layer (bars) and overall, and gradient storage bits, per run. */
export function BitsCompare({ runs }: Props) {
  const acc = runs.map((r) => ({ r, a: runAccounting(r) }));
  const layers = Math.max(0, ...acc.map(({ a }) => a.saved.perLayer.length));
  const rows = Array.from({ length: layers }, (_, l) => {
    const row: Record<string, number | string> = { layer: `layer ${l}` };
    for (const { r, a } of acc) if (a.saved.perLayer[l]) row[r.id] = a.saved.perLayer[l].bits;
    return row;
  });
  return (
    <figure className="chart" data-testid="bits-compare">
      <figcaption>Bits per element (scales included; fp32 = 32) — exact, from each scheme and model, not measured</figcaption>
      <ResponsiveContainer width="100%" height={170}>
        <BarChart data={rows} margin={{ top: 8, right: 16, bottom: 0, left: 0 }}>
          <CartesianGrid strokeDasharray="3 3" />
          <XAxis dataKey="layer" tick={{ fontSize: 11 }} />
          <YAxis domain={[0, 32]} ticks={[0, 4, 8, 16, 32]} width={32} />
          <Tooltip formatter={(v) => (typeof v === 'number' ? `${v.toFixed(2)} bits` : String(v))} />
          {acc.map(({ r }) => (
            <Bar key={r.id} dataKey={r.id} name={`${r.label}: saved activations`} fill={colorOf(runs, r)} isAnimationActive={false} />
          ))}
        </BarChart>
      </ResponsiveContainer>
      <table className="memory plot-table">
        <thead>
          <tr><th>run</th><td>saved activations</td><td>gradient storage</td></tr>
        </thead>
        <tbody>
          {acc.map(({ r, a }) => (
            <tr key={r.id}>
              <th><i className="swatch" style={{ background: colorOf(runs, r) }} /> {r.label}</th>
              <td data-testid={`bits-${r.id}`} data-value={a.saved.overall}>{a.saved.overall.toFixed(2)}</td>
              <td data-testid={`grad-bits-${r.id}`} data-value={a.grads.bits}>{a.grads.bits.toFixed(2)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </figure>
  );
}

/**
 * Bytes one peer would send per training step: the data-parallel gradient all-reduce (fp32 against
 * AGoQ's INT8) and, for TP schemes, the tensor-parallel all-reduces under the scheme's codec against
 * fp32. Exact protocol byte counts; these runs are single-device, so nothing is measured.
 */
export function WireCompare({ runs }: Props) {
  const acc = runs.map((r) => ({ r, a: runAccounting(r) }));
  const peers = acc[0]?.a.dp.peers ?? 2;
  const rows = acc.map(({ r, a }) => ({
    run: r.label,
    dpFp32: a.dp.fp32Bytes,
    dpInt8: a.dp.int8Bytes,
    tp: a.tp?.stepBytes ?? 0,
    tpFp32: a.tp?.fp32StepBytes ?? 0,
  }));
  const anyTp = acc.some(({ a }) => a.tp);
  return (
    <figure className="chart" data-testid="wire-compare">
      <figcaption>Bytes on the wire per training step, per peer — exact protocol counts, not measured (runs here are single-device)</figcaption>
      <ResponsiveContainer width="100%" height={200}>
        <BarChart data={rows} margin={{ top: 8, right: 16, bottom: 8, left: 8 }}>
          <CartesianGrid strokeDasharray="3 3" />
          <XAxis dataKey="run" tick={{ fontSize: 10 }} interval={0} />
          <YAxis tickFormatter={(v: number) => formatBytes(v)} width={84} tick={{ fontSize: 11 }} />
          <Tooltip formatter={(v) => (typeof v === 'number' ? formatBytes(v) : String(v))} />
          <Legend />
          <Bar dataKey="dpFp32" name={`DP all-reduce, fp32 (${peers} peers)`} fill="#94a3b8" isAnimationActive={false} />
          <Bar dataKey="dpInt8" name={`DP all-reduce, AGoQ INT8 (${peers} peers)`} fill="#10b981" isAnimationActive={false} />
          {anyTp && <Bar dataKey="tpFp32" name="TP all-reduces, fp32" fill="#f59e0b" isAnimationActive={false} />}
          {anyTp && <Bar dataKey="tp" name="TP all-reduces, the scheme's codec" fill="#ef4444" isAnimationActive={false} />}
        </BarChart>
      </ResponsiveContainer>
      <ul className="small plot-notes">
        {acc.map(({ r, a }) => (
          <li key={r.id} data-testid={`wire-${r.id}`} data-dp-fp32={a.dp.fp32Bytes} data-dp-int8={a.dp.int8Bytes} data-tp={a.tp?.stepBytes ?? 0} data-tp-fp32={a.tp?.fp32StepBytes ?? 0}>
            {r.label}: DP {formatBytes(a.dp.fp32Bytes)} fp32 / {formatBytes(a.dp.int8Bytes)} INT8
            {a.tp
              ? `; TP ${a.tp.degree} × ${a.tp.codec}: ${formatBytes(a.tp.stepBytes)} (${formatBytes(a.tp.perAllReduceBytes)} per all-reduce, fp32 ${formatBytes(a.tp.fp32StepBytes)})`
              : '; no tensor parallelism'}
          </li>
        ))}
      </ul>
    </figure>
  );
}
