import { CartesianGrid, Legend, Line, LineChart, ResponsiveContainer, Tooltip, XAxis, YAxis } from 'recharts';
import { formatFigure } from '../lab/suites';
import type { GemmPoint } from './state';

/** fp32 GEMM GFLOP/s of the fastest variant against the square size n (log scale), with the baseline's line when one is loaded. */
export function GemmChart({ points }: { points: GemmPoint[] }) {
  const hasBaseline = points.some((p) => p.baseline !== undefined);
  return (
    <div className={points.length ? 'chart' : 'chart empty'} data-testid="gemm-chart" data-points={points.length}>
      <h2>fp32 GEMM throughput against size</h2>
      {points.length === 0 ? (
        <p className="muted">The gemm suite&apos;s square problems (n×n×n) appear here as they are measured.</p>
      ) : (
        <ResponsiveContainer width="100%" height={260}>
          <LineChart data={points} margin={{ top: 8, right: 24, bottom: 16, left: 8 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="n" type="number" scale="log" domain={['dataMin', 'dataMax']} ticks={points.map((p) => p.n)} label={{ value: 'n (n×n×n)', position: 'insideBottom', offset: -8 }} />
            <YAxis type="number" domain={[0, 'auto']} tickFormatter={formatFigure} width={64} label={{ value: 'GFLOP/s', angle: -90, position: 'insideLeft' }} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? `${formatFigure(v)} GFLOP/s` : String(v))} />
            <Legend verticalAlign="top" />
            <Line dataKey="ours" name="ours (fastest variant)" stroke="#2563eb" isAnimationActive={false} />
            {hasBaseline && <Line dataKey="baseline" name="baseline" stroke="#dc2626" connectNulls isAnimationActive={false} />}
          </LineChart>
        </ResponsiveContainer>
      )}
    </div>
  );
}
