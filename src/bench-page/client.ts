/**
 * Page-side handle on a bench worker (the pattern of src/worker/client.ts): spawns it, forwards its
 * messages, and turns every way a worker can end (done, a fatal error, a script that fails to load,
 * an undecodable message, Stop) into exactly one final message, so the page never waits on a
 * worker that is gone.
 */
import type { BenchRequest, FromBenchWorker, ToBenchWorker } from './protocol';

export interface BenchHandle {
  /** Terminates the worker at once (a GPU pass in flight cannot be cancelled anyway); rows already posted stay. */
  stop(): void;
}

export interface BenchLaunchOptions {
  /** For tests: a factory instead of the real module worker. */
  createWorker?: () => Worker;
}

export function launchBench(request: BenchRequest, onMessage: (msg: FromBenchWorker) => void, opts: BenchLaunchOptions = {}): BenchHandle {
  const worker = opts.createWorker ? opts.createWorker() : new Worker(new URL('./bench.worker.ts', import.meta.url), { type: 'module', name: 'bench' });
  let finished = false;
  const finish = (msg: FromBenchWorker): void => {
    if (finished) return;
    finished = true;
    worker.terminate();
    onMessage(msg);
  };
  worker.onmessage = (ev: MessageEvent<FromBenchWorker>) => {
    if (finished) return;
    if (ev.data.type === 'done' || ev.data.type === 'error') finish(ev.data);
    else onMessage(ev.data);
  };
  worker.onerror = (ev: ErrorEvent) => {
    ev.preventDefault();
    const where = ev.filename ? ` (${ev.filename}:${ev.lineno})` : '';
    finish({ type: 'error', kind: 'error', message: `bench worker failed: ${ev.message || 'could not load the worker script'}${where}` });
  };
  worker.onmessageerror = () => finish({ type: 'error', kind: 'error', message: 'bench worker sent a message that could not be decoded' });
  worker.postMessage({ type: 'start', request } satisfies ToBenchWorker);
  return { stop: () => finish({ type: 'stopped' }) };
}
