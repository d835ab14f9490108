/**
 * The token cache in the browser's origin-private file system (workers only: it writes and reads
 * through synchronous access handles, so a training worker draws batches between GPU steps without
 * holding the corpus in memory). Per key: KEY.train and KEY.val (little-endian uint16 or uint32
 * tokens) and KEY.json (PreparedMeta), written last, so a key with a .json is complete.
 */
/// <reference lib="webworker" />
import type { Split } from '../engine/train/data/data';
import type { TokenArray, TokenStore } from '../engine/train/data/token-stream';
import type { PreparedMeta, TokenCache, TokenCacheWriter } from './prepare';

const DIR = 'token-cache';
/** Tokens are buffered to writes of this many bytes (OPFS writes are cheap, but not per document). */
const WRITE_BYTES = 1 << 20;

type SyncHandle = FileSystemSyncAccessHandle;

async function dir(): Promise<FileSystemDirectoryHandle> {
  const root = await navigator.storage.getDirectory();
  return root.getDirectoryHandle(DIR, { create: true });
}

/** Several runs may read one corpus: read-only handles share the file where the browser has them. */
async function openHandle(h: FileSystemFileHandle, readOnly: boolean): Promise<SyncHandle> {
  const open = h.createSyncAccessHandle as unknown as (o?: { mode: string }) => Promise<SyncHandle>;
  if (!readOnly) return open.call(h);
  try {
    return await open.call(h, { mode: 'read-only' });
  } catch {
    return open.call(h);
  }
}

class FileSink {
  private buf = new Uint8Array(WRITE_BYTES);
  private used = 0;
  private at = 0;

  constructor(private readonly h: SyncHandle) {
    h.truncate(0);
  }

  write(tokens: TokenArray): void {
    const bytes = new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength);
    if (this.used + bytes.length > this.buf.length) this.flush();
    if (bytes.length > this.buf.length) {
      this.at += this.h.write(bytes, { at: this.at });
      return;
    }
    this.buf.set(bytes, this.used);
    this.used += bytes.length;
  }

  flush(): void {
    if (this.used === 0) return;
    this.at += this.h.write(this.buf.subarray(0, this.used), { at: this.at });
    this.used = 0;
  }

  close(): void {
    try {
      this.flush();
      this.h.flush();
    } finally {
      // Closed even when a write fails: an open handle would refuse every later preparation of this key.
      this.h.close();
    }
  }

  /** Closes without writing what is buffered (the files are about to be removed). */
  abandon(): void {
    try {
      this.h.close();
    } catch {
      // already closed
    }
  }
}

class FileTokenStore implements TokenStore {
  readonly length: number;
  private scratch = new Uint8Array(0);

  constructor(private readonly h: SyncHandle, private readonly width: 2 | 4) {
    this.length = h.getSize() / width;
  }

  read(at: number, out: Int32Array): void {
    const n = out.length * this.width;
    if (this.scratch.length < n) this.scratch = new Uint8Array(n);
    const got = this.h.read(this.scratch.subarray(0, n), { at: at * this.width });
    if (got !== n) throw new Error(`token cache: read ${got} of ${n} bytes at token ${at}`);
    const view = this.width === 2 ? new Uint16Array(this.scratch.buffer, 0, out.length) : new Uint32Array(this.scratch.buffer, 0, out.length);
    out.set(view);
  }

  close(): void {
    this.h.close();
  }
}

export class OpfsTokenCache implements TokenCache {
  async meta(key: string): Promise<PreparedMeta | null> {
    try {
      const f = await (await (await dir()).getFileHandle(`${key}.json`)).getFile();
      return JSON.parse(await f.text()) as PreparedMeta;
    } catch {
      return null;
    }
  }

  async create(key: string): Promise<TokenCacheWriter> {
    const d = await dir();
    // A stale meta from an earlier, interrupted preparation must not vouch for the new files.
    await d.removeEntry(`${key}.json`).catch(() => undefined);
    const sinks = {} as Record<Split, FileSink>;
    try {
      for (const split of ['train', 'val'] as const) {
        const h = await openHandle(await d.getFileHandle(`${key}.${split}`, { create: true }), false);
        try {
          sinks[split] = new FileSink(h);
        } catch (e) {
          h.close();
          throw e;
        }
      }
    } catch (e) {
      // The handles opened so far are closed: left open, they would refuse the next try at this key.
      for (const sink of Object.values(sinks)) sink.abandon();
      throw e;
    }
    return {
      sinks,
      commit: async (meta) => {
        sinks.train.close();
        sinks.val.close();
        const h = await openHandle(await d.getFileHandle(`${key}.json`, { create: true }), false);
        try {
          h.truncate(0);
          h.write(new TextEncoder().encode(JSON.stringify(meta)), { at: 0 });
          h.flush();
        } finally {
          h.close();
        }
      },
      discard: async () => {
        sinks.train.abandon();
        sinks.val.abandon();
        for (const name of [`${key}.train`, `${key}.val`, `${key}.json`]) await d.removeEntry(name).catch(() => undefined);
      },
    };
  }

  async free(): Promise<number | null> {
    const e = await navigator.storage.estimate();
    return e.quota !== undefined && e.usage !== undefined ? Math.max(0, e.quota - e.usage) : null;
  }

  /** The stores of a prepared corpus, and its meta (the tokenizer with it); close them when done. */
  async open(key: string): Promise<{ meta: PreparedMeta; stores: Record<Split, TokenStore>; close(): void }> {
    const meta = await this.meta(key);
    if (!meta) throw new Error('the prepared data is no longer in this browser\'s storage: drop the files again');
    const d = await dir();
    const train = new FileTokenStore(await openHandle(await d.getFileHandle(`${key}.train`), true), meta.width);
    const val = new FileTokenStore(await openHandle(await d.getFileHandle(`${key}.val`), true), meta.width);
    return { meta, stores: { train, val }, close: () => { train.close(); val.close(); } };
  }
}
