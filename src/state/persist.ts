/**
 * Persistence of runs across page reloads, behind a small repository interface: the IndexedDB
 * adapter (idb.ts) implements it in the page, `MemoryRepo` in tests. The store logic (what is
 * saved when, and how a run comes back) lives here and is tested without a browser.
 */
import type { CheckpointBlob, FromWorker } from '../worker/protocol';
import type { LabStore } from './lab';
import { reduceRun, restoredRun, type RunState } from './runs';

export interface RunRepo {
  loadRuns(): Promise<RunState[]>;
  /** A run record (the debounced save); it keeps a stored checkpoint the run does not know of yet (keepStoredCheckpoint). */
  saveRun(run: RunState): Promise<void>;
  /** A run's final state, committed durably (awaited before the page shows it finished). */
  saveFinal(run: RunState): Promise<void>;
  deleteRun(id: string): Promise<void>;
  /**
   * The latest checkpoint of a run (replaces the previous one) and the run record naming it, in
   * one transaction: a stored `checkpointStep` always describes the stored checkpoint.
   */
  saveCheckpoint(run: RunState, files: CheckpointBlob): Promise<void>;
  loadCheckpoint(id: string): Promise<CheckpointBlob | undefined>;
  /** A user-picked training text, kept so the run can continue after a reload. */
  saveText(id: string, text: string): Promise<void>;
  loadText(id: string): Promise<string | undefined>;
}

/**
 * The record a debounced save writes over `stored`. The store learns of a checkpoint only after its
 * transaction, so the run a save captured may predate a stored checkpoint: writing it as it is would
 * leave the checkpoint's files with a record naming none (or an older step), and a closed tab unresumable.
 */
export function keepStoredCheckpoint(run: RunState, stored: RunState | undefined): RunState {
  const had = stored?.checkpointStep ?? null;
  return had !== null && (run.checkpointStep === null || run.checkpointStep < had) ? { ...run, checkpointStep: had } : run;
}

export class MemoryRepo implements RunRepo {
  runs = new Map<string, RunState>();
  checkpoints = new Map<string, CheckpointBlob>();
  texts = new Map<string, string>();
  async loadRuns() { return [...this.runs.values()].map((r) => structuredClone(r)); }
  async saveRun(run: RunState) { this.runs.set(run.id, structuredClone(keepStoredCheckpoint(run, this.runs.get(run.id)))); }
  async saveFinal(run: RunState) { await this.saveRun(run); }
  async deleteRun(id: string) { this.runs.delete(id); this.checkpoints.delete(id); this.texts.delete(id); }
  async saveCheckpoint(run: RunState, files: CheckpointBlob) { await this.saveRun(run); this.checkpoints.set(run.id, files); }
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
    // A failed write is reported on its run (quota: the run says so), and once for the page.
    const failed = (id: string) => (e: unknown) => {
      store.getState().setStorageError(id, storageProblem(e));
      throw e;
    };
    for (const [id, run] of Object.entries(now)) if (prev[id] !== run) writes.push(repo.saveRun(run).then(() => store.getState().setStorageError(id, null), failed(id)));
    for (const id of Object.keys(prev)) if (!(id in now)) writes.push(repo.deleteRun(id));
    const results = await Promise.allSettled(writes);
    const bad = results.find((r) => r.status === 'rejected');
    if (bad) onError(`Could not save runs in this browser's storage: ${storageProblem(bad.reason)}`);
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

/** What a storage failure means for the user (a full quota says how to make room). */
export function storageProblem(e: unknown): string {
  const name = (e as { name?: string } | null)?.name;
  const message = e instanceof Error ? e.message : String(e);
  if (name === 'QuotaExceededError' || /quota/i.test(message)) {
    return `this browser's storage for the page is full (${message}); remove old runs or export them, then free space`;
  }
  return message;
}

/** Asks the browser to keep this page's storage under pressure; false where it declines or cannot. */
export async function requestPersistentStorage(storage: StorageManager | undefined = globalThis.navigator?.storage): Promise<boolean> {
  try {
    return (await storage?.persisted?.()) || ((await storage?.persist?.()) ?? false);
  } catch {
    return false;
  }
}

/**
 * Folds a run's worker messages into the store, committing to storage first what must outlive the
 * page: a checkpoint shows (and counts for resuming) only once it and its run record are stored, and
 * a run shows done or failed only once that final state is stored. Writes of one run stay in order.
 */
export class RunJournal {
  private chains = new Map<string, Promise<void>>();

  constructor(private readonly store: LabStore, private readonly repo: RunRepo | null, private readonly now: () => number = Date.now) {}

  receive(msg: FromWorker): void {
    const { store, repo } = this;
    const apply = () => store.getState().applyMessage(msg);
    if (!repo || (msg.type !== 'checkpoint' && msg.type !== 'done' && msg.type !== 'error')) {
      apply();
      return;
    }
    const id = msg.runId;
    if (msg.type === 'done') store.getState().setPhase(id, 'saving the final state');
    this.enqueue(id, async () => {
      const run = store.getState().runs[id];
      if (!run) return; // removed meanwhile: nothing to keep
      const next = reduceRun(run, msg, this.now());
      try {
        if (msg.type === 'checkpoint') await repo.saveCheckpoint(next, msg.files);
        else await repo.saveFinal(next);
      } catch (e) {
        store.getState().setStorageError(id, storageProblem(e));
      }
      apply();
    });
  }

  /** Resolves once every write queued so far is done (tests; the page's unload). */
  async settled(): Promise<void> {
    await Promise.all([...this.chains.values()]);
  }

  private enqueue(id: string, job: () => Promise<void>): void {
    const chain = (this.chains.get(id) ?? Promise.resolve()).then(job);
    this.chains.set(id, chain);
    void chain.finally(() => {
      if (this.chains.get(id) === chain) this.chains.delete(id);
    });
  }
}
