/**
 * The IndexedDB adapter of RunRepo, on the `idb` library: three object stores keyed by run id.
 * A checkpoint and the run record that names it go in one strict-durability transaction, so a
 * browser closed at any moment finds the two agreeing. The logic is in persist.ts.
 */
import { type DBSchema, type IDBPDatabase, openDB } from 'idb';
import type { CheckpointBlob } from '../worker/protocol';
import { keepStoredCheckpoint, type RunRepo } from './persist';
import type { RunState } from './runs';

const DB_NAME = 'webgpu-lab';
const VERSION = 1;

interface LabDb extends DBSchema {
  runs: { key: string; value: RunState };
  checkpoints: { key: string; value: CheckpointBlob };
  texts: { key: string; value: string };
}

export function openDb(): Promise<IDBPDatabase<LabDb>> {
  return new Promise((resolve, reject) => {
    openDB<LabDb>(DB_NAME, VERSION, {
      upgrade(db) {
        for (const name of ['runs', 'checkpoints', 'texts'] as const) if (!db.objectStoreNames.contains(name)) db.createObjectStore(name);
      },
      blocked: () => reject(new Error('IndexedDB is blocked by another tab of this page (close it and reload)')),
      // A newer version opened in another tab: let it upgrade; this tab stops saving.
      blocking(_current, _next, event) { (event.target as IDBDatabase).close(); },
    }).then(resolve, reject);
  });
}

export class IdbRepo implements RunRepo {
  constructor(private readonly db: IDBPDatabase<LabDb>) {}

  loadRuns(): Promise<RunState[]> {
    return this.db.getAll('runs');
  }
  async saveRun(run: RunState): Promise<void> {
    // Read and write in one transaction, so a checkpoint's transaction cannot land in between.
    const tx = this.db.transaction('runs', 'readwrite');
    const stored = await tx.store.get(run.id);
    await Promise.all([tx.store.put(keepStoredCheckpoint(run, stored), run.id), tx.done]);
  }
  async saveFinal(run: RunState): Promise<void> {
    const tx = this.db.transaction('runs', 'readwrite', { durability: 'strict' });
    await Promise.all([tx.store.put(run, run.id), tx.done]);
  }
  async deleteRun(id: string): Promise<void> {
    const tx = this.db.transaction(['runs', 'checkpoints', 'texts'], 'readwrite');
    await Promise.all([tx.objectStore('runs').delete(id), tx.objectStore('checkpoints').delete(id), tx.objectStore('texts').delete(id), tx.done]);
  }
  async saveCheckpoint(run: RunState, files: CheckpointBlob): Promise<void> {
    const tx = this.db.transaction(['runs', 'checkpoints'], 'readwrite', { durability: 'strict' });
    await Promise.all([tx.objectStore('checkpoints').put(files, run.id), tx.objectStore('runs').put(run, run.id), tx.done]);
  }
  loadCheckpoint(id: string): Promise<CheckpointBlob | undefined> {
    return this.db.get('checkpoints', id);
  }
  async saveText(id: string, text: string): Promise<void> {
    await this.db.put('texts', text, id);
  }
  loadText(id: string): Promise<string | undefined> {
    return this.db.get('texts', id);
  }
}
