import type { BenchRow } from '../lab/suites';
import { formatFigure } from '../lab/suites';

/** The rows the CLI's table shows (every row goes to the JSON), as they arrive, with the baseline's ratio where one matched. */
export function BenchTable({ rows }: { rows: BenchRow[] }) {
  const shown = rows.filter((r) => r.show);
  if (rows.length === 0) return <p className="muted" data-testid="bench-empty">Rows appear here as each measurement finishes.</p>;
  return (
    // Focusable, so a keyboard can scroll the table where it is wider than the screen (phones).
    <div className="bench-table-wrap" tabIndex={0} role="region" aria-label="Benchmark results">
      <table className="bench-table" data-testid="bench-table" data-rows={shown.length}>
        <thead>
          <tr>
            <th>suite</th>
            <th>problem</th>
            <th>ours</th>
            <th>time</th>
            <th>timer</th>
            <th>baseline</th>
            <th>ours / theirs</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((r, i) => (
            <tr key={i} data-testid="bench-row" data-suite={r.suite} data-key={r.key ?? ''} data-value={r.value} data-ratio={r.ratio ?? ''}>
              <td>{r.suite}</td>
              <td>{r.name}</td>
              <td className="num">
                {formatFigure(r.value)} {r.unit}
              </td>
              <td className="num" title={r.ms === undefined ? 'this row reports no time of its own' : undefined}>{r.ms === undefined ? '–' : `${formatFigure(r.ms)} ms`}</td>
              <td title={r.method === undefined ? 'this row reports no timer' : undefined}>{r.method ?? '–'}</td>
              <td>{r.baseline ? `${formatFigure(r.baseline.value)} (${r.baseline.name})` : ''}</td>
              <td className="num" data-testid={r.ratio === undefined ? undefined : 'ratio'}>
                {r.ratio === undefined ? '' : `${r.ratio.toFixed(2)}×`}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {shown.length < rows.length && (
        <p className="small muted">{rows.length - shown.length} more rows (the variants that were neither fastest nor the heuristic&apos;s pick) are in the JSON.</p>
      )}
    </div>
  );
}
