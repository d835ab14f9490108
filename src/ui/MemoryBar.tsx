import { MEM_CATEGORIES, type MemReport } from '../engine/gpu/memory';
import { CATEGORY_COLORS } from './colors';
import { formatBytes } from './format';

/**
 * One stacked horizontal bar of memory per category, scaled to `scale` bytes (the largest total
 * among the bars shown together, so bars compare by length).
 */
export function MemoryBar({ mem, scale, testId, label }: { mem: MemReport; scale: number; testId: string; label?: string }) {
  const width = scale > 0 ? (mem.total / scale) * 100 : 0;
  return (
    <div className="mem-bar-row" data-testid={testId} data-total={mem.total}>
      {label && <span className="mem-bar-label">{label}</span>}
      <div className="mem-bar-track">
        <div className="mem-bar" style={{ width: `${width}%` }}>
          {MEM_CATEGORIES.filter((c) => mem[c] > 0).map((c) => (
            <span
              key={c}
              className="mem-seg"
              data-category={c}
              data-bytes={mem[c]}
              title={`${c}: ${formatBytes(mem[c])}`}
              style={{ width: `${(mem[c] / mem.total) * 100}%`, background: CATEGORY_COLORS[c] }}
            />
          ))}
        </div>
      </div>
      <span className="mem-bar-total">{formatBytes(mem.total)}</span>
    </div>
  );
}

export function MemoryLegend() {
  return (
    <div className="mem-legend">
      {MEM_CATEGORIES.map((c) => (
        <span key={c}>
          <i style={{ background: CATEGORY_COLORS[c] }} /> {c}
        </span>
      ))}
    </div>
  );
}
