/**
 * Page-side handle on the data worker: one job at a time, as a promise with progress; cancel
 * terminates the worker (a new one starts with the next job), so even BPE training stops at once.
 */
import type { FromDataWorker, ToDataWorker } from './data-protocol';

type Job = ToDataWorker extends infer M ? (M extends ToDataWorker ? Omit<M, 'id'> : never) : never;
type Result<T extends ToDataWorker['type']> = Extract<FromDataWorker, { type: { inspect: 'inspected'; prepare: 'prepared'; import: 'imported' }[T] }>;

export class CancelledError extends Error {
  constructor() {
    super('cancelled');
    this.name = 'CancelledError';
  }
}

export class DataWorkerClient {
  private worker: Worker | null = null;
  private nextId = 1;
  private pending: { id: number; resolve: (m: FromDataWorker) => void; reject: (e: Error) => void; progress?: (phase: string, done: number, total: number) => void } | null = null;

  constructor(private readonly create: () => Worker = () => new Worker(new URL('./data.worker.ts', import.meta.url), { type: 'module', name: 'data' })) {}

  get busy(): boolean {
    return this.pending !== null;
  }

  run<T extends ToDataWorker['type']>(job: Extract<Job, { type: T }>, progress?: (phase: string, done: number, total: number) => void): Promise<Result<T>> {
    if (this.pending) this.cancel();
    const w = (this.worker ??= this.spawn());
    const id = this.nextId++;
    return new Promise<Result<T>>((resolve, reject) => {
      this.pending = { id, resolve: resolve as (m: FromDataWorker) => void, reject, progress };
      w.postMessage({ ...job, id } as ToDataWorker);
    });
  }

  cancel(): void {
    const p = this.pending;
    this.pending = null;
    this.worker?.terminate();
    this.worker = null;
    p?.reject(new CancelledError());
  }

  dispose(): void {
    this.cancel();
  }

  private spawn(): Worker {
    const w = this.create();
    w.onmessage = (ev: MessageEvent<FromDataWorker>) => {
      const m = ev.data;
      const p = this.pending;
      if (!p || m.id !== p.id) return;
      if (m.type === 'progress') {
        p.progress?.(m.phase, m.done, m.total);
        return;
      }
      this.pending = null;
      if (m.type === 'failed') p.reject(new Error(m.message));
      else p.resolve(m);
    };
    // A reply that cannot be deserialized would otherwise leave the job pending for ever.
    w.onmessageerror = () => {
      const p = this.pending;
      this.pending = null;
      p?.reject(new Error('the data worker sent a message the page could not read'));
    };
    w.onerror = (ev) => {
      ev.preventDefault();
      const p = this.pending;
      this.pending = null;
      this.worker?.terminate();
      this.worker = null;
      p?.reject(new Error(`data worker failed: ${ev.message || 'could not load the worker script'}`));
    };
    return w;
  }
}
