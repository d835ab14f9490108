import { MEM_CATEGORIES, type MemReport } from '../engine/gpu/memory';
import { formatBytes } from './format';

/** GPU memory the engine actually allocated, per category (from its allocation ledger). */
export function MemoryTable({ mem }: { mem: MemReport | null }) {
  if (!mem) return null;
  return (
    <table className="memory" data-testid="memory">
      <caption>GPU memory</caption>
      <tbody>
        {MEM_CATEGORIES.map((c) => (
          <tr key={c} data-testid={`mem-${c}`}>
            <th>{c}</th>
            <td>{formatBytes(mem[c])}</td>
          </tr>
        ))}
        <tr className="total" data-testid="mem-total">
          <th>total</th>
          <td>{formatBytes(mem.total)}</td>
        </tr>
      </tbody>
    </table>
  );
}
