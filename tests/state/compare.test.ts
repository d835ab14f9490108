/** The comparison views' data: smoothing, the baseline difference, shared-GPU detection, unique labels, the run queue. */
import { describe, expect, it } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { diffFromBaseline, mergeSeries, sharedGpuRuns, smooth, uniqueLabel } from '../../src/state/compare';
import { createLabStore } from '../../src/state/lab';
import { runQueue, submitDraft } from '../../src/state/queue';
import { lossBpb, newRun, pointsInBpb } from '../../src/state/runs';
import { DEFAULT_RUN_CONFIG, type RunConfig } from '../../src/worker/protocol';

const pts = (losses: number[]) => losses.map((loss, step) => ({ step, loss, elapsed_s: step * 2 }));

describe('compare', () => {
  it('smooths with a debiased moving average, and leaves points alone at 0', () => {
    expect(smooth(pts([1, 2, 3]), 0).map((p) => p.loss)).toEqual([1, 2, 3]);
    const s = smooth(pts([4, 4, 4, 4]), 0.9).map((p) => p.loss);
    for (const v of s) expect(v).toBeCloseTo(4, 12); // debiased: a constant stays constant
    const noisy = smooth(pts([1, 3, 1, 3, 1, 3]), 0.6).map((p) => p.loss);
    expect(Math.max(...noisy.slice(2)) - Math.min(...noisy.slice(2))).toBeLessThan(2);
  });

  it('shows a 0.1 % difference from the baseline, absolute and in %, on shared steps only', () => {
    const base = pts([4, 3, 2]);
    const run = pts([4.004, 3.003, 2.002, 1.5]);
    const abs = diffFromBaseline(run, base, 'absolute');
    expect(abs.map((p) => p.step)).toEqual([0, 1, 2]);
    expect(abs[0].loss).toBeCloseTo(0.004, 12);
    const pct = diffFromBaseline(run, base, 'percent');
    for (const p of pct) expect(p.loss).toBeCloseTo(0.1, 9);
  });

  it('merges series on x, one row per x', () => {
    const rows = mergeSeries([{ key: 'a', points: pts([1, 2]) }, { key: 'b', points: [{ step: 1, loss: 5 }, { step: 2, loss: NaN }] }], 'step');
    expect(rows).toEqual([{ x: 0, a: 1 }, { x: 1, a: 2, b: 5 }]);
    expect(mergeSeries([{ key: 'a', points: pts([1, 2]) }], 'elapsed_s').map((r) => r.x)).toEqual([0, 2]);
  });

  it('finds runs whose training overlapped in time', () => {
    const r = (id: string, startedAt: number, finishedAt: number | null) => ({ id, startedAt, finishedAt, status: finishedAt === null ? 'running' as const : 'done' as const, train: pts([1]) });
    expect(sharedGpuRuns([r('a', 0, 10), r('b', 10, 20), r('c', 20, null)], 30)).toEqual([]);
    expect(sharedGpuRuns([r('a', 0, 10), r('b', 5, 20), r('c', 30, null)], 40)).toEqual(['a', 'b']);
    expect(sharedGpuRuns([{ ...r('a', 0, 10), train: [] }, r('b', 5, 20)], 40)).toEqual([]);
    // An interrupted run ends at its last message, not now: a later run did not share the GPU with it.
    const cut = { ...r('a', 0, null), status: 'interrupted' as const, spans: [{ from: 0, to: 10 }] };
    expect(sharedGpuRuns([cut, r('b', 20, 30), r('c', 25, null)], 100)).toEqual(['b', 'c']);
    // Continued later, its second span counts (and the gap does not).
    const continued = { ...cut, status: 'running' as const, spans: [{ from: 0, to: 10 }, { from: 50, to: 50 }] };
    expect(sharedGpuRuns([continued, r('b', 20, 30)], 100)).toEqual([]);
    expect(sharedGpuRuns([continued, r('b', 20, 60)], 100)).toEqual(['a', 'b']);
  });

  it('makes labels unique, in the store too, and renames keep them unique', () => {
    expect(uniqueLabel('x', [])).toBe('x');
    expect(uniqueLabel('x', ['x', 'x #2'])).toBe('x #3');
    const store = createLabStore();
    const s = () => store.getState();
    const a = s().addRun(DEFAULT_RUN_CONFIG);
    const b = s().addRun(DEFAULT_RUN_CONFIG);
    expect(s().runs[a].label).not.toBe(s().runs[b].label);
    expect(s().runs[b].label).toBe(`${s().runs[a].label} #2`);
    s().renameRun(b, '  mine  ');
    expect(s().runs[b].label).toBe('mine');
    s().renameRun(a, 'mine');
    expect(s().runs[a].label).toBe('mine #2');
    s().renameRun(a, '   ');
    expect(s().runs[a].label).toBe('mine #2');
  });
});

describe('run queue', () => {
  it('starts queued runs one after another when "one run at a time" is on', () => {
    const store = createLabStore();
    const s = () => store.getState();
    const started: RunConfig[] = [];
    const runs = {
      start(config: RunConfig = s().draft) {
        started.push(config);
        return s().addRun(config);
      },
    };
    const stop = runQueue(store, runs);
    s().setQueueRuns(true);
    submitDraft(store, runs); // nothing trains: starts at once
    s().setDraft({ steps: 7 });
    submitDraft(store, runs); // queued behind the first
    expect(started).toHaveLength(1);
    expect(s().queued.map((q) => q.config.steps)).toEqual([7]);
    const first = s().runOrder[0];
    s().applyMessage({ type: 'done', runId: first, step: 0, reason: 'completed' });
    expect(started.map((c) => c.steps)).toEqual([DEFAULT_RUN_CONFIG.steps, 7]);
    expect(s().queued).toEqual([]);
    // Off: Start starts at once, beside the running one.
    s().setQueueRuns(false);
    submitDraft(store, runs);
    expect(started).toHaveLength(3);
    stop();
  });
});

describe('status after the last step and time left', () => {
  it('says the run is finishing after its last step, and estimates the time left from recent steps', async () => {
    const { runPhase, timeLeft } = await import('../../src/state/runs');
    const store = createLabStore();
    const s = () => store.getState();
    const id = s().addRun({ ...DEFAULT_RUN_CONFIG, steps: 8 });
    s().applyMessage({ type: 'ready', runId: id, info: { adapter: 'x', params: 1, vocabSize: 65, memory: emptyMemReport() }, startStep: 0 });
    const m = (step: number, elapsed_s: number) => s().applyMessage({ type: 'metrics', runId: id, metrics: { step, loss: 4, lr: 1e-3, grad_norm: 1, tokens_per_s: 10, mem: emptyMemReport(), elapsed_s } });
    // The first step compiles the backward pass (30 s); then 2 s a step, one of them 14 s (a run beside it compiling).
    m(0, 30);
    m(1, 32);
    m(2, 34);
    expect(timeLeft(s().runs[id])).toBeNull(); // two measured steps are not enough
    m(3, 36);
    expect(timeLeft(s().runs[id])).toBe(8); // 4 steps left at 2 s each
    m(4, 50);
    expect(timeLeft(s().runs[id])).toBe(6); // the outlier does not move the median
    expect(runPhase(s().runs[id])).toBe('training');
    for (const [step, t] of [[5, 52], [6, 54], [7, 56]]) m(step, t);
    expect(runPhase(s().runs[id])).toBe('finishing after the last step');
    expect(timeLeft(s().runs[id])).toBe(0);
  });
});

describe('loss in bits per byte', () => {
  it('converts each split with its own tokens and bytes, and leaves out runs whose bytes are unknown', () => {
    const data = { key: 'a'.repeat(64), files: [{ name: 'x.jsonl', bytes: 1000 }], field: 'text', tokens: { train: 300, val: 50 }, bytes: { train: 900, val: 200 }, documents: { train: 9, val: 1 } };
    const run = newRun('r1', { ...DEFAULT_RUN_CONFIG, data }, 0);
    const pts = [{ step: 0, loss: 2 }, { step: 1, loss: 1.5 }];
    expect(lossBpb(run, 2, 'train')).toBeCloseTo((2 * 300) / 900 / Math.LN2, 12);
    expect(lossBpb(run, 2, 'val')).toBeCloseTo((2 * 50) / 200 / Math.LN2, 12);
    expect(pointsInBpb(run, pts, 'val').map((p) => p.loss)).toEqual(pts.map((p) => lossBpb(run, p.loss, 'val')));
    const bundled = newRun('r2', { ...DEFAULT_RUN_CONFIG }, 0);
    expect(lossBpb(bundled, 2, 'train')).toBeNull();
    expect(pointsInBpb(bundled, pts, 'train')).toEqual([]);
  });
});
