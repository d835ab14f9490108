import { CartesianGrid, ComposedChart, Legend, Line, ResponsiveContainer, Scatter, Tooltip, XAxis, YAxis } from 'recharts';
import type { LossPoint, TrainPoint } from '../state/runs';

interface Props {
  train: TrainPoint[];
  val: LossPoint[];
  color?: string;
}

/** Train loss per step as a line, validation loss as points on the same axes. */
export function LossChart({ train, val, color = '#2563eb' }: Props) {
  return (
    <div className={train.length ? 'chart' : 'chart empty'} data-testid="loss-chart" data-points={train.length} data-val-points={val.length}>
      {train.length === 0 ? (
        <p className="muted">The loss curve appears here after the first step.</p>
      ) : (
        <ResponsiveContainer width="100%" height={220}>
          <ComposedChart margin={{ top: 8, right: 16, bottom: 8, left: 0 }}>
            <CartesianGrid strokeDasharray="3 3" />
            <XAxis dataKey="step" type="number" domain={['dataMin', 'dataMax']} allowDecimals={false} />
            <YAxis type="number" domain={['auto', 'auto']} tickFormatter={(v: number) => v.toFixed(2)} width={48} />
            <Tooltip formatter={(v) => (typeof v === 'number' ? v.toFixed(4) : String(v))} />
            <Legend />
            <Line data={train} dataKey="loss" name="train loss" stroke={color} dot={false} isAnimationActive={false} />
            <Scatter data={val} dataKey="loss" name="validation loss" fill="currentColor" isAnimationActive={false} />
          </ComposedChart>
        </ResponsiveContainer>
      )}
    </div>
  );
}
