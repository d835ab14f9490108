/**
 * Page-side handle on a training worker: spawns it, forwards its messages, and turns every way a
 * worker can fail (script load error, uncaught exception, undecodable message, stop ignored) into
 * a protocol `error` or `done` message, so the page never waits on a worker that is gone.
 */
import type { CheckpointBlob, FromWorker, RunConfig, ToWorker } from './protocol';

export interface RunHandle {
  /**
   * Asks the worker to stop after the current step (terminating it if it does not answer in time);
   * before the first step, terminates it at once.
   */
  stop(): void;
  /** Asks the worker to stop stepping after the current step, keeping its state. */
  pause(): void;
  resume(): void;
  /** Terminates the worker at once. */
  dispose(): void;
}

export interface LaunchOptions {
  corpusUrl: string;
  /** How long a stop may take before the worker is terminated (a step on SwiftShader can be slow). */
  stopGraceMs?: number;
  /** For tests: a factory instead of the real module worker. */
  createWorker?: () => Worker;
}

/** Where the run's text comes from, and the checkpoint it continues from. */
export interface LaunchData {
  text?: string;
  /** The files of a checkpoint to start from (config.init). */
  init?: Blob[];
  resume?: { files: CheckpointBlob; elapsed_s: number };
}

function defaultWorker(runId: string): Worker {
  return new Worker(new URL('./train.worker.ts', import.meta.url), { type: 'module', name: `train-${runId}` });
}

export function launchRun(
  runId: string,
  config: RunConfig,
  onMessage: (msg: FromWorker) => void,
  opts: LaunchOptions,
  data: LaunchData = {},
): RunHandle {
  const worker = opts.createWorker ? opts.createWorker() : defaultWorker(runId);
  let finished = false;
  /** Before the first step there is nothing to keep, so a stop then terminates at once. */
  let stepped = false;
  let stopTimer: ReturnType<typeof setTimeout> | undefined;

  const finish = (msg: FromWorker): void => {
    if (finished) return;
    finished = true;
    clearTimeout(stopTimer);
    worker.terminate();
    onMessage(msg);
  };

  worker.onmessage = (ev: MessageEvent<FromWorker>) => {
    const msg = ev.data;
    if (finished) return;
    if (msg.type === 'metrics') stepped = true;
    if (msg.type === 'done' || msg.type === 'error') finish({ ...msg, runId });
    else onMessage({ ...msg, runId } as FromWorker);
  };
  worker.onerror = (ev: ErrorEvent) => {
    ev.preventDefault();
    const where = ev.filename ? ` (${ev.filename}:${ev.lineno})` : '';
    finish({ type: 'error', runId, kind: 'error', message: `training worker failed: ${ev.message || 'could not load the worker script'}${where}` });
  };
  worker.onmessageerror = () => {
    finish({ type: 'error', runId, kind: 'error', message: 'training worker sent a message that could not be decoded' });
  };

  const start: ToWorker = data.text !== undefined
    ? { type: 'start', runId, config, text: data.text }
    : { type: 'start', runId, config, corpusUrl: opts.corpusUrl };
  if (data.resume) start.resume = data.resume;
  if (data.init) start.init = data.init;
  worker.postMessage(start);

  const send = (type: 'pause' | 'resume') => {
    if (!finished) worker.postMessage({ type, runId } satisfies ToWorker);
  };

  return {
    stop() {
      if (finished) return;
      if (!stepped) {
        finish({ type: 'done', runId, step: -1, reason: 'stopped' });
        return;
      }
      const msg: ToWorker = { type: 'stop', runId };
      worker.postMessage(msg);
      clearTimeout(stopTimer);
      stopTimer = setTimeout(
        () => finish({ type: 'done', runId, step: -1, reason: 'stopped' }),
        opts.stopGraceMs ?? 60_000,
      );
    },
    pause: () => send('pause'),
    resume: () => send('resume'),
    dispose() {
      if (finished) return;
      finished = true;
      clearTimeout(stopTimer);
      worker.terminate();
    },
  };
}
