import { afterEach, describe, expect, it, vi } from 'vitest';
import { readFileSync } from 'node:fs';
import { prepareData } from '../../src/worker/prepare';
import { OpfsTokenCache } from '../../src/worker/token-cache';

/**
 * The origin-private file system as far as the token cache uses it, with the browser's rule that a
 * file takes one sync access handle at a time (a second, or removing the file, throws
 * NoModificationAllowedError), and failures to inject by file name.
 */
class FakeFile {
  bytes = new Uint8Array(0);
  open = false;
  failOpen: Error | null = null;
  failWrite: Error | null = null;
}

const domError = (name: string, message: string) => Object.assign(new Error(message), { name });

class FakeDir {
  files = new Map<string, FakeFile>();

  async getDirectoryHandle() {
    return this;
  }

  async getFileHandle(name: string, o?: { create?: boolean }) {
    let f = this.files.get(name);
    if (!f) {
      if (!o?.create) throw domError('NotFoundError', `${name} not found`);
      f = new FakeFile();
      this.files.set(name, f);
    }
    const file = f;
    return {
      getFile: async () => new File([file.bytes as BlobPart], name),
      createSyncAccessHandle: async () => {
        if (file.open) throw domError('NoModificationAllowedError', `${name}: another access handle is open`);
        if (file.failOpen) {
          const e = file.failOpen;
          file.failOpen = null;
          throw e;
        }
        file.open = true;
        let closed = false;
        const live = () => {
          if (closed) throw domError('InvalidStateError', `${name}: handle closed`);
        };
        return {
          truncate(n: number) { live(); file.bytes = file.bytes.slice(0, n); },
          write(b: Uint8Array, at: { at: number }) {
            live();
            if (file.failWrite) {
              const e = file.failWrite;
              file.failWrite = null;
              throw e;
            }
            const out = new Uint8Array(Math.max(file.bytes.length, at.at + b.length));
            out.set(file.bytes);
            out.set(b, at.at);
            file.bytes = out;
            return b.length;
          },
          flush() { live(); },
          getSize() { live(); return file.bytes.length; },
          close() { live(); closed = true; file.open = false; },
        };
      },
    };
  }

  async removeEntry(name: string) {
    const f = this.files.get(name);
    if (!f) throw domError('NotFoundError', `${name} not found`);
    if (f.open) throw domError('NoModificationAllowedError', `${name}: an access handle is open`);
    this.files.delete(name);
  }

  /** The files of the key that ends with `suffix` (the key is the cache's). */
  file(suffix: string): FakeFile {
    const hit = [...this.files].find(([n]) => n.endsWith(suffix));
    if (!hit) throw new Error(`no file *${suffix}`);
    return hit[1];
  }

  openFiles(): string[] {
    return [...this.files].filter(([, f]) => f.open).map(([n]) => n);
  }
}

function fakeOpfs(): FakeDir {
  const dir = new FakeDir();
  vi.stubGlobal('navigator', { storage: { getDirectory: async () => dir, estimate: async () => ({ quota: 1 << 30, usage: 0 }) } });
  return dir;
}

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 6000);
const data = () => [new File([text], 'shakespeare.txt')];
const prepare = () => prepareData(data(), { tokenizer: { kind: 'char' } }, new OpfsTokenCache());

afterEach(() => {
  vi.unstubAllGlobals();
});

describe('OpfsTokenCache', () => {
  it('prepares into KEY.train, KEY.val and KEY.json and closes every handle', async () => {
    const dir = fakeOpfs();
    const prepared = await prepare();
    expect([...dir.files.keys()].sort()).toEqual([`${prepared.key}.json`, `${prepared.key}.train`, `${prepared.key}.val`]);
    expect(dir.openFiles()).toEqual([]);
    const opened = await new OpfsTokenCache().open(prepared.key);
    expect(opened.stores.train.length + opened.stores.val.length).toBe(prepared.stats.tokens.train + prepared.stats.tokens.val);
    opened.close();
    expect((await prepare()).cached).toBe(true);
  });

  it('a meta write that fails leaves no handle open: the next preparation of the same data takes', async () => {
    const dir = fakeOpfs();
    const first = prepare();
    // The meta file is created in commit, after the token files: fail its write when it appears.
    const orig = dir.getFileHandle.bind(dir);
    dir.getFileHandle = async (name, o) => {
      const h = await orig(name, o);
      if (name.endsWith('.json') && o?.create) {
        dir.file('.json').failWrite = domError('QuotaExceededError', 'quota');
        dir.getFileHandle = orig;
      }
      return h;
    };
    await expect(first).rejects.toThrow(/storage for the page ran out/);
    expect(dir.openFiles()).toEqual([]);
    const again = await prepare();
    expect(again.cached).toBe(false);
    expect(dir.openFiles()).toEqual([]);
  });

  it('a token file that cannot be opened closes the one opened before it, and the error reaches the caller', async () => {
    const dir = fakeOpfs();
    const orig = dir.getFileHandle.bind(dir);
    dir.getFileHandle = async (name, o) => {
      const h = await orig(name, o);
      if (name.endsWith('.val')) {
        dir.file('.val').failOpen = domError('InvalidStateError', 'cannot open the val file');
        dir.getFileHandle = orig;
      }
      return h;
    };
    await expect(prepare()).rejects.toThrow('cannot open the val file');
    expect(dir.openFiles()).toEqual([]);
    expect((await prepare()).cached).toBe(false);
    expect(dir.openFiles()).toEqual([]);
  });
});
