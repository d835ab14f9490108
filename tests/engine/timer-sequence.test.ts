// timeSequence's wall-clock path (engine/gpu/timer.ts) with a stand-in runtime: items timed in order,
// warm-ups untimed, and two sequences asked for at once (a pipelined caller) timed one after the other.
import { describe, expect, it } from 'vitest';
import type { Dispatch, Runtime } from '../../src/engine/gpu/runtime';
import { timeSequence } from '../../src/engine/gpu/timer';

describe('timeSequence without timestamp queries', () => {
  it('times each item\'s reps by wall clock, one sequence at a time per device', async () => {
    const log: string[] = [];
    const d = (name: string) => [{ label: name }] as unknown as Dispatch[];
    const rt = {
      device: {}, gpu: { features: {} },
      run: (ds: Dispatch[]) => void log.push((ds[0] as unknown as { label: string }).label),
      sync: () => new Promise<void>((res) => setTimeout(() => (log.push('sync'), res()), 1)),
    } as unknown as Runtime;
    const [a, b] = await Promise.all([
      timeSequence(rt, [{ dispatches: d('a'), warmup: 1, reps: 2 }, { dispatches: d('b') }]),
      timeSequence(rt, [{ dispatches: d('c') }]),
    ]);
    expect(log).toEqual(['sync', 'a', 'a', 'sync', 'a', 'sync', 'b', 'sync', 'sync', 'c', 'sync']);
    expect(a).toHaveLength(2);
    expect(b).toHaveLength(1);
    expect([...a, ...b].every((x) => x > 0)).toBe(true);
  });
});
