/** The page's store and worker protocol, without a browser: messages in, run state out. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { createLabStore } from '../../src/state/lab';
import { RunController } from '../../src/state/runner';
import { launchRun } from '../../src/worker/client';
import { checkRunConfig, DEFAULT_RUN_CONFIG, type FromWorker, ToWorkerSchema } from '../../src/worker/protocol';

const metrics = (step: number, loss: number) => ({
  type: 'metrics' as const,
  runId: '',
  metrics: { step, loss, lr: 1e-3, grad_norm: 1, tokens_per_s: 100, mem: emptyMemReport(), elapsed_s: step },
});

/** Stands in for a module Worker: records posted messages, lets the test emit events. */
class FakeWorker {
  posted: unknown[] = [];
  terminated = false;
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onerror: ((ev: ErrorEvent) => void) | null = null;
  onmessageerror: (() => void) | null = null;
  postMessage(m: unknown) {
    this.posted.push(m);
  }
  terminate() {
    this.terminated = true;
  }
  emit(msg: Partial<FromWorker>) {
    this.onmessage?.({ data: msg } as MessageEvent);
  }
}

afterEach(() => vi.useRealTimers());

describe('run config', () => {
  it('accepts the default and rejects bad values with readable reasons', () => {
    expect(checkRunConfig(DEFAULT_RUN_CONFIG)).toBeNull();
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, batch: 0 })).toMatch(/batch/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, preset: 'huge' })).toMatch(/preset/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, steps: 2.5 })).toMatch(/steps/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, extra: 1 })).not.toBeNull();
  });

  it('validates messages into the worker', () => {
    expect(ToWorkerSchema.safeParse({ type: 'stop', runId: 'a' }).success).toBe(true);
    expect(ToWorkerSchema.safeParse({ type: 'start', runId: 'a', config: DEFAULT_RUN_CONFIG, corpusUrl: '/x' }).success).toBe(true);
    expect(ToWorkerSchema.safeParse({ type: 'start', runId: 'a', config: {}, corpusUrl: '/x' }).success).toBe(false);
    expect(ToWorkerSchema.safeParse({ type: 'go', runId: 'a' }).success).toBe(false);
  });
});

describe('lab store', () => {
  it('folds a run from start to done, keyed by id, and ignores messages after the end', () => {
    const store = createLabStore(() => 1000);
    const s = () => store.getState();
    const a = s().addRun(DEFAULT_RUN_CONFIG);
    const b = s().addRun({ ...DEFAULT_RUN_CONFIG, preset: 'tiny' });
    expect(a).not.toBe(b);
    expect(s().runOrder).toEqual([a, b]);
    expect(s().activeRunId).toBe(b);

    s().applyMessage({ type: 'ready', runId: a, startStep: 0, info: { adapter: 'x', params: 10, vocabSize: 65, memory: emptyMemReport() } });
    s().applyMessage({ ...metrics(0, 4.2), runId: a });
    s().applyMessage({ ...metrics(1, 3.9), runId: a });
    s().applyMessage({ type: 'val', runId: a, step: 1, loss: 4.0 });
    s().applyMessage({ type: 'sample', runId: a, step: 1, text: 'hi' });
    s().applyMessage({ type: 'done', runId: a, step: 1, reason: 'completed' });
    s().applyMessage({ ...metrics(2, 1.0), runId: a });
    s().applyMessage({ type: 'error', runId: b, kind: 'webgpu', message: 'no adapter' });

    const ra = s().runs[a];
    expect(ra.status).toBe('done');
    expect(ra.train.map((p) => p.loss)).toEqual([4.2, 3.9]);
    expect(ra.latest?.step).toBe(1);
    expect(ra.val).toEqual([{ step: 1, loss: 4.0, elapsed_s: 1 }]);
    expect(ra.samples.at(-1)?.text).toBe('hi');
    expect(s().runs[b].status).toBe('error');
    expect(s().runs[b].error?.kind).toBe('webgpu');
    expect(s().runs[b].train).toEqual([]);
  });

  it('refuses to start an invalid config and reports why', () => {
    const store = createLabStore();
    const runs = new RunController(store, { corpusUrl: '/x', createWorker: () => new FakeWorker() as unknown as Worker });
    expect(runs.start({ ...DEFAULT_RUN_CONFIG, batch: -1 })).toBeNull();
    expect(store.getState().appErrors[0]).toMatch(/batch/);
    expect(store.getState().runOrder).toEqual([]);
  });
});

describe('worker client', () => {
  it('sends start, forwards messages, terminates on done', () => {
    const w = new FakeWorker();
    const seen: FromWorker[] = [];
    launchRun('r1', DEFAULT_RUN_CONFIG, (m) => seen.push(m), { corpusUrl: '/c', createWorker: () => w as unknown as Worker });
    expect(w.posted).toEqual([{ type: 'start', runId: 'r1', config: DEFAULT_RUN_CONFIG, corpusUrl: '/c' }]);
    w.emit(metrics(0, 4));
    w.emit({ type: 'done', step: 0, reason: 'completed' });
    w.emit(metrics(1, 3));
    expect(seen.map((m) => m.type)).toEqual(['metrics', 'done']);
    expect(seen.every((m) => m.runId === 'r1')).toBe(true);
    expect(w.terminated).toBe(true);
  });

  it('turns a worker load failure into an error message', () => {
    const w = new FakeWorker();
    const seen: FromWorker[] = [];
    launchRun('r2', DEFAULT_RUN_CONFIG, (m) => seen.push(m), { corpusUrl: '/c', createWorker: () => w as unknown as Worker });
    w.onerror?.({ message: 'SyntaxError: bad', filename: 'w.js', lineno: 3, preventDefault() {} } as ErrorEvent);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatchObject({ type: 'error', runId: 'r2' });
    expect((seen[0] as { message: string }).message).toMatch(/SyntaxError: bad \(w\.js:3\)/);
    expect(w.terminated).toBe(true);
  });

  it('stop asks first, then terminates a worker that does not answer', () => {
    vi.useFakeTimers();
    const w = new FakeWorker();
    const seen: FromWorker[] = [];
    const h = launchRun('r3', DEFAULT_RUN_CONFIG, (m) => seen.push(m), { corpusUrl: '/c', stopGraceMs: 500, createWorker: () => w as unknown as Worker });
    w.emit(metrics(0, 4));
    h.stop();
    expect(w.posted.at(-1)).toEqual({ type: 'stop', runId: 'r3' });
    expect(w.terminated).toBe(false);
    vi.advanceTimersByTime(501);
    expect(w.terminated).toBe(true);
    expect(seen.at(-1)).toMatchObject({ type: 'done', reason: 'stopped' });
  });

  it('stop before the first step terminates at once', () => {
    const w = new FakeWorker();
    const seen: FromWorker[] = [];
    const h = launchRun('r4', DEFAULT_RUN_CONFIG, (m) => seen.push(m), { corpusUrl: '/c', createWorker: () => w as unknown as Worker });
    w.emit({ type: 'status', phase: 'building model' });
    h.stop();
    expect(w.terminated).toBe(true);
    expect(seen.map((m) => m.type)).toEqual(['status', 'done']);
    expect(w.posted.some((m) => (m as { type: string }).type === 'stop')).toBe(false);
  });
});
