/**
 * A run is never lost: checkpoints and final states are stored before the page shows them, the
 * IndexedDB adapter keeps a checkpoint and its run record together, quota failures land on the run.
 */
import 'fake-indexeddb/auto';
import { describe, expect, it } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { IdbRepo, openDb } from '../../src/state/idb';
import { createLabStore } from '../../src/state/lab';
import { MemoryRepo, persistRuns, requestPersistentStorage, restoreRuns, RunJournal, type RunRepo, storageProblem } from '../../src/state/persist';
import { canContinue, restoredRun } from '../../src/state/runs';
import { DEFAULT_RUN_CONFIG, type FromWorker } from '../../src/worker/protocol';

const info = { adapter: 'x', params: 10, vocabSize: 65, memory: emptyMemReport() };
const files = (b: number) => ({ 'model.safetensors': new Uint8Array([b]), 'config.json': '{}' });
const metrics = (runId: string, step: number): FromWorker => ({
  type: 'metrics', runId, metrics: { step, loss: 4 - step / 10, lr: 1e-3, grad_norm: 1, tokens_per_s: 100, mem: emptyMemReport(), elapsed_s: step },
});

/** A repo whose writes wait until released, to look at the page between "posted" and "stored". */
class SlowRepo extends MemoryRepo {
  private gates: (() => void)[] = [];
  release() { for (const g of this.gates.splice(0)) g(); }
  private gate() { return new Promise<void>((r) => this.gates.push(r)); }
  override async saveFinal(run: Parameters<MemoryRepo['saveFinal']>[0]) { await this.gate(); await super.saveFinal(run); }
  override async saveCheckpoint(run: Parameters<MemoryRepo['saveCheckpoint']>[0], f: Parameters<MemoryRepo['saveCheckpoint']>[1]) { await this.gate(); await super.saveCheckpoint(run, f); }
}

function started(repo: RunRepo, steps = 4) {
  const store = createLabStore();
  const journal = new RunJournal(store, repo);
  const id = store.getState().addRun({ ...DEFAULT_RUN_CONFIG, steps });
  journal.receive({ type: 'ready', runId: id, info, startStep: 0 });
  return { store, journal, id, run: () => store.getState().runs[id] };
}

describe('RunJournal', () => {
  it('shows a checkpoint and "done" only once stored, the final state included', async () => {
    const repo = new SlowRepo();
    const { journal, id, run } = started(repo);
    for (let i = 0; i < 4; i++) journal.receive(metrics(id, i));
    journal.receive({ type: 'checkpoint', runId: id, step: 4, files: files(4) });
    journal.receive({ type: 'done', runId: id, step: 3, reason: 'completed' });
    await Promise.resolve();
    expect(run().checkpointStep).toBeNull(); // not stored yet: not offered
    expect(run().status).toBe('running');
    expect(run().phase).toBe('saving the final state');
    repo.release();
    await new Promise((r) => setTimeout(r, 0));
    repo.release();
    await journal.settled();
    expect(run().status).toBe('done');
    expect(run().checkpointStep).toBe(4);
    // What is stored is the finished run with all its points, and its checkpoint.
    expect(repo.runs.get(id)?.status).toBe('done');
    expect(repo.runs.get(id)?.train).toHaveLength(4);
    expect(repo.runs.get(id)?.checkpointStep).toBe(4);
    expect(repo.checkpoints.get(id)?.['model.safetensors']).toEqual(new Uint8Array([4]));
  });

  it('a page closed between the final checkpoint and "done" comes back done; earlier, interrupted and resumable', async () => {
    const repo = new MemoryRepo();
    const { journal, id } = started(repo);
    journal.receive(metrics(id, 0));
    journal.receive(metrics(id, 1));
    journal.receive({ type: 'checkpoint', runId: id, step: 2, files: files(2) });
    await journal.settled();
    const mid = restoredRun(repo.runs.get(id)!);
    expect(mid.status).toBe('interrupted');
    // Said as it happened: closed (a browser closed or a reload), after which step, what was kept.
    expect(mid.phase).toBe('the page was closed after step 2 (checkpoint of step 2 kept)');
    expect(canContinue(mid)).toBe(true);
    expect(mid.checkpointStep).toBe(2);
    journal.receive(metrics(id, 2));
    journal.receive(metrics(id, 3));
    journal.receive({ type: 'checkpoint', runId: id, step: 4, files: files(4) });
    await journal.settled(); // the page closes here, before "done" is posted
    const end = restoredRun(repo.runs.get(id)!);
    expect(end.status).toBe('done');
    expect(end.train).toHaveLength(4);
  });

  it('reports a full storage on the run and still finishes it', async () => {
    const repo = new MemoryRepo();
    repo.saveFinal = () => Promise.reject(Object.assign(new Error('The quota has been exceeded.'), { name: 'QuotaExceededError' }));
    const { journal, id, run } = started(repo);
    journal.receive({ type: 'done', runId: id, step: 0, reason: 'completed' });
    await journal.settled();
    expect(run().status).toBe('done');
    expect(run().storageError).toMatch(/storage for the page is full.*remove old runs/);
  });

  it('the debounced saves mark the run whose write failed, and clear the mark once it is saved', async () => {
    const repo = new MemoryRepo();
    const store = createLabStore();
    const errors: string[] = [];
    const p = persistRuns(store, repo, (m) => errors.push(m), 1);
    const id = store.getState().addRun(DEFAULT_RUN_CONFIG);
    const save = repo.saveRun.bind(repo);
    repo.saveRun = () => Promise.reject(new DOMException('full', 'QuotaExceededError'));
    await p.flush();
    expect(store.getState().runs[id].storageError).toMatch(/full/);
    expect(errors[0]).toMatch(/storage for the page is full/);
    repo.saveRun = save;
    store.getState().setPhase(id, 'training');
    await p.flush();
    expect(store.getState().runs[id].storageError).toBeNull();
    p.stop();
  });
});

describe('IndexedDB adapter (idb)', () => {
  it('round-trips runs, checkpoints and texts, and deletes all three', async () => {
    const repo = new IdbRepo(await openDb());
    const store = createLabStore();
    const journal = new RunJournal(store, repo);
    const id = store.getState().addRun({ ...DEFAULT_RUN_CONFIG, steps: 2 });
    await repo.saveText(id, 'hello');
    journal.receive({ type: 'ready', runId: id, info, startStep: 0 });
    journal.receive(metrics(id, 0));
    journal.receive(metrics(id, 1));
    journal.receive({ type: 'checkpoint', runId: id, step: 2, files: files(7) });
    journal.receive({ type: 'done', runId: id, step: 1, reason: 'completed' });
    await journal.settled();
    const again = new IdbRepo(await openDb());
    const b = createLabStore();
    expect(await restoreRuns(b, again)).toBe(1);
    expect(b.getState().runs[id]).toMatchObject({ status: 'done', checkpointStep: 2 });
    expect(b.getState().runs[id].train).toHaveLength(2);
    expect((await again.loadCheckpoint(id))?.['model.safetensors']).toEqual(new Uint8Array([7]));
    expect(await again.loadText(id)).toBe('hello');
    await again.deleteRun(id);
    expect(await again.loadRuns()).toEqual([]);
    expect(await again.loadCheckpoint(id)).toBeUndefined();
    expect(await again.loadText(id)).toBeUndefined();
  });

  it('a debounced save of a run older than its stored checkpoint leaves the run resumable (both repos)', async () => {
    for (const repo of [new MemoryRepo(), new IdbRepo(await openDb())]) {
      const { journal, id, run } = started(repo);
      journal.receive(metrics(id, 0));
      const captured = run(); // what the debounced save took: no checkpoint yet
      journal.receive({ type: 'checkpoint', runId: id, step: 1, files: files(1) });
      await journal.settled();
      await repo.saveRun(captured); // lands after the checkpoint's transaction
      const back = restoredRun((await repo.loadRuns()).find((r) => r.id === id)!);
      expect(back.checkpointStep).toBe(1);
      expect(canContinue(back)).toBe(true);
      await repo.deleteRun(id);
    }
  });
});

describe('helpers', () => {
  it('names a full quota and asks for persistent storage once', async () => {
    expect(storageProblem(new DOMException('x', 'QuotaExceededError'))).toMatch(/full/);
    expect(storageProblem(new Error('other'))).toBe('other');
    const calls: string[] = [];
    const fake = { persisted: async () => { calls.push('persisted'); return false; }, persist: async () => { calls.push('persist'); return true; } } as unknown as StorageManager;
    expect(await requestPersistentStorage(fake)).toBe(true);
    expect(calls).toEqual(['persisted', 'persist']);
    expect(await requestPersistentStorage(undefined)).toBe(false);
  });
});
