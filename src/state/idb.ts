/**
 * The IndexedDB adapter of RunRepo (raw API, no library): three object stores keyed by run id.
 * Only a thin translation of requests into promises; the logic is in persist.ts.
 */
import type { CheckpointBlob } from '../worker/protocol';
import type { RunRepo } from './persist';
import type { RunState } from './runs';

const DB_NAME = 'webgpu-lab';
const VERSION = 1;
const RUNS = 'runs';
const CHECKPOINTS = 'checkpoints';
const TEXTS = 'texts';

function req<T>(r: IDBRequest<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error ?? new Error('IndexedDB request failed'));
  });
}

export function openDb(factory: IDBFactory = indexedDB): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const r = factory.open(DB_NAME, VERSION);
    r.onupgradeneeded = () => {
      const db = r.result;
      for (const name of [RUNS, CHECKPOINTS, TEXTS]) if (!db.objectStoreNames.contains(name)) db.createObjectStore(name);
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error ?? new Error('could not open IndexedDB'));
    r.onblocked = () => reject(new Error('IndexedDB is blocked by another tab'));
  });
}

export class IdbRepo implements RunRepo {
  constructor(private readonly db: IDBDatabase) {}

  private store(name: string, mode: IDBTransactionMode): IDBObjectStore {
    return this.db.transaction(name, mode).objectStore(name);
  }

  async loadRuns(): Promise<RunState[]> {
    return (await req(this.store(RUNS, 'readonly').getAll())) as RunState[];
  }
  async saveRun(run: RunState): Promise<void> {
    await req(this.store(RUNS, 'readwrite').put(run, run.id));
  }
  async deleteRun(id: string): Promise<void> {
    const tx = this.db.transaction([RUNS, CHECKPOINTS, TEXTS], 'readwrite');
    for (const name of [RUNS, CHECKPOINTS, TEXTS]) tx.objectStore(name).delete(id);
    await new Promise<void>((resolve, reject) => {
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error ?? new Error('IndexedDB delete failed'));
    });
  }
  async saveCheckpoint(id: string, files: CheckpointBlob): Promise<void> {
    await req(this.store(CHECKPOINTS, 'readwrite').put(files, id));
  }
  async loadCheckpoint(id: string): Promise<CheckpointBlob | undefined> {
    return (await req(this.store(CHECKPOINTS, 'readonly').get(id))) as CheckpointBlob | undefined;
  }
  async saveText(id: string, text: string): Promise<void> {
    await req(this.store(TEXTS, 'readwrite').put(text, id));
  }
  async loadText(id: string): Promise<string | undefined> {
    return (await req(this.store(TEXTS, 'readonly').get(id))) as string | undefined;
  }
}
