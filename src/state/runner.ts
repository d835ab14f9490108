/**
 * Connects the store to training workers: one worker per run, its messages folded into the store.
 * The worker handles live here, not in the store, because they are not data.
 */
import { launchRun, type LaunchOptions, type RunHandle } from '../worker/client';
import { checkRunConfig, type RunConfig } from '../worker/protocol';
import type { LabStore } from './lab';

export class RunController {
  private handles = new Map<string, RunHandle>();

  constructor(
    private readonly store: LabStore,
    private readonly launch: Omit<LaunchOptions, 'createWorker'> & { createWorker?: () => Worker },
  ) {}

  /** Starts a run with `config` (default: the form's draft); returns its id, or null if invalid. */
  start(config: RunConfig = this.store.getState().draft): string | null {
    const s = this.store.getState();
    const problem = checkRunConfig(config);
    if (problem) {
      s.reportAppError(`Cannot start: ${problem}`);
      return null;
    }
    const id = s.addRun(config);
    try {
      const handle = launchRun(id, config, (msg) => {
        this.store.getState().applyMessage(msg);
        if (msg.type === 'done' || msg.type === 'error') this.handles.delete(id);
      }, this.launch);
      this.handles.set(id, handle);
    } catch (e) {
      this.store.getState().applyMessage({ type: 'error', runId: id, kind: 'error', message: `could not start the training worker: ${(e as Error).message}` });
    }
    return id;
  }

  stop(runId: string): void {
    const h = this.handles.get(runId);
    if (!h) return;
    this.store.getState().markStopping(runId);
    h.stop();
  }

  disposeAll(): void {
    for (const h of this.handles.values()) h.dispose();
    this.handles.clear();
  }
}
