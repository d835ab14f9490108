/**
 * The page's tuning cache: one IndexedDB record (the cache's JSON text) in its own database, read and
 * written by the bench page's "Tune this GPU" worker and read by the training worker before it builds
 * its model (IndexedDB is there in windows and workers alike). What is read back is validated as any
 * import is (parseTuneCache): a record another build or a person left malformed counts as empty.
 */
import { openDB } from 'idb';
import { TuneCache } from './cache';

const DB_NAME = 'webgpu-lab-tune';
const STORE = 'cache';
const KEY = 'tune';

function open() {
  return openDB(DB_NAME, 1, { upgrade: (db) => void (db.objectStoreNames.contains(STORE) || db.createObjectStore(STORE)) });
}

/** The stored cache (empty when there is none, IndexedDB is unavailable, or the record is malformed: `problem` says why). */
export async function loadTuneCacheIdb(): Promise<{ cache: TuneCache; problem?: string }> {
  if (typeof indexedDB === 'undefined') return { cache: new TuneCache(), problem: 'IndexedDB is unavailable' };
  try {
    const db = await open();
    try {
      const text = (await db.get(STORE, KEY)) as unknown;
      return { cache: text === undefined ? new TuneCache() : TuneCache.parse(text, 'the stored tuning cache') };
    } finally {
      db.close();
    }
  } catch (e) {
    return { cache: new TuneCache(), problem: (e as Error).message };
  }
}

export async function saveTuneCacheIdb(cache: TuneCache): Promise<void> {
  const db = await open();
  try {
    await db.put(STORE, cache.serialize(), KEY);
  } finally {
    db.close();
  }
}
