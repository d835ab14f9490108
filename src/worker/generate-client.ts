/**
 * Page-side handle on the generation worker: one worker for the page, started on the first request
 * and kept (with the decoder it built) for the next; a failed worker becomes an `error` event.
 */
import type { CheckpointBlob } from './protocol';
import type { FromGenerate, GenerateParams, ToGenerate } from './generate-protocol';

export interface Generation {
  stop(): void;
}

export class GenerateClient {
  private worker: Worker | null = null;
  private nextId = 0;
  private listeners = new Map<number, (msg: FromGenerate) => void>();

  constructor(private readonly createWorker: () => Worker = () =>
    new Worker(new URL('./generate.worker.ts', import.meta.url), { type: 'module', name: 'generate' })) {}

  private ensure(): Worker {
    if (this.worker) return this.worker;
    const w = this.createWorker();
    w.onmessage = (ev: MessageEvent<FromGenerate>) => {
      const msg = ev.data;
      this.listeners.get(msg.id)?.(msg);
      if (msg.type === 'done' || msg.type === 'error') this.listeners.delete(msg.id);
    };
    w.onerror = (ev: ErrorEvent) => {
      ev.preventDefault();
      this.fail(`generation worker failed: ${ev.message || 'could not load the worker script'}`);
    };
    this.worker = w;
    return w;
  }

  /** Fails every pending request and drops the worker (the next request starts a fresh one). */
  private fail(message: string): void {
    for (const [id, l] of this.listeners) l({ type: 'error', id, message });
    this.listeners.clear();
    this.worker?.terminate();
    this.worker = null;
  }

  /** Generates from `files` (`key` names the checkpoint, so the same one is not rebuilt); events go to `on`. */
  generate(key: string, files: CheckpointBlob, params: GenerateParams, on: (msg: FromGenerate) => void): Generation {
    const id = this.nextId++;
    this.listeners.set(id, on);
    const w = this.ensure();
    w.postMessage({ type: 'generate', id, key, files, params } satisfies ToGenerate);
    return { stop: () => this.worker?.postMessage({ type: 'stop', id } satisfies ToGenerate) };
  }

  dispose(): void {
    this.worker?.terminate();
    this.worker = null;
    this.listeners.clear();
  }
}
