/**
 * Persistence of runs across page reloads, behind a small repository interface: the IndexedDB
 * adapter (idb.ts) implements it in the page, `MemoryRepo` in tests. The store logic (what is
 * saved when, and how a run comes back) lives here and is tested without a browser.
 */
import type { CheckpointBlob } from '../worker/protocol';
import type { LabStore } from './lab';
import { restoredRun, type RunState } from './runs';

export interface RunRepo {
  loadRuns(): Promise<RunState[]>;
  saveRun(run: RunState): Promise<void>;
  deleteRun(id: string): Promise<void>;
  /** The latest checkpoint per run (replaces the previous one). */
  saveCheckpoint(id: string, files: CheckpointBlob): Promise<void>;
  loadCheckpoint(id: string): Promise<CheckpointBlob | undefined>;
  /** A user-picked training text, kept so the run can continue after a reload. */
  saveText(id: string, text: string): Promise<void>;
  loadText(id: string): Promise<string | undefined>;
}

export class MemoryRepo implements RunRepo {
  runs = new Map<string, RunState>();
  checkpoints = new Map<string, CheckpointBlob>();
  texts = new Map<string, string>();
  async loadRuns() { return [...this.runs.values()].map((r) => structuredClone(r)); }
  async saveRun(run: RunState) { this.runs.set(run.id, structuredClone(run)); }
  async deleteRun(id: string) { this.runs.delete(id); this.checkpoints.delete(id); this.texts.delete(id); }
  async saveCheckpoint(id: string, files: CheckpointBlob) { this.checkpoints.set(id, files); }
  async loadCheckpoint(id: string) { return this.checkpoints.get(id); }
  async saveText(id: string, text: string) { this.texts.set(id, text); }
  async loadText(id: string) { return this.texts.get(id); }
}

/**
 * Writes runs that changed (by reference: the reducer makes a new object per change) at most every
 * `delayMs`, and deletes removed ones. Returns a flush function (also called on unload).
 */
export function persistRuns(store: LabStore, repo: RunRepo, onError: (message: string) => void, delayMs = 1000): { flush(): Promise<void>; stop(): void } {
  let saved = store.getState().runs;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const flush = async () => {
    clearTimeout(timer);
    timer = undefined;
    const now = store.getState().runs;
    const prev = saved;
    saved = now;
    const writes: Promise<void>[] = [];
    for (const [id, run] of Object.entries(now)) if (prev[id] !== run) writes.push(repo.saveRun(run));
    for (const id of Object.keys(prev)) if (!(id in now)) writes.push(repo.deleteRun(id));
    try {
      await Promise.all(writes);
    } catch (e) {
      onError(`Could not save runs in this browser's storage: ${(e as Error).message}`);
    }
  };
  const unsub = store.subscribe((s) => {
    if (s.runs !== saved && timer === undefined) timer = setTimeout(() => void flush(), delayMs);
  });
  return { flush, stop: () => { unsub(); clearTimeout(timer); } };
}

/** Loads saved runs into the store (live ones as interrupted), oldest first. */
export async function restoreRuns(store: LabStore, repo: RunRepo): Promise<number> {
  const runs = (await repo.loadRuns()).map(restoredRun).sort((a, b) => a.startedAt - b.startedAt);
  store.getState().restoreRuns(runs);
  return runs.length;
}
