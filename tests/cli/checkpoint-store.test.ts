import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  CheckpointError, checkOutDir, commitCheckpoint, type CommitStage, readLatestCheckpoint, readVerified, writeExport,
} from '../../src/cli/checkpoint-store';

const dirs: string[] = [];
const tmpDir = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'ckstore-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const filesAt = (step: number) => ({
  'model.safetensors': new Uint8Array(5000 + step).fill(step),
  'optimizer.safetensors': new Uint8Array(9000 + step).fill(step + 1),
  'config.json': `{"step": ${step}}`,
  'lab.json': JSON.stringify({ step }),
});
const text = (b: Uint8Array) => Buffer.from(b).toString('utf8');
const STAGES: CommitStage[] = ['write-file', 'write-manifest', 'rename-folder', 'write-latest', 'rename-latest', 'prune'];

class Killed extends Error {}

describe('checkpoint store', () => {
  it('commits and reads back a checkpoint, keeping only the latest folder', () => {
    const run = tmpDir();
    expect(readLatestCheckpoint(run)).toBeNull();
    commitCheckpoint(run, 10, filesAt(10));
    commitCheckpoint(run, 20, filesAt(20));
    const got = readLatestCheckpoint(run)!;
    expect(got.step).toBe(20);
    expect(text(got.files['lab.json'])).toBe('{"step":20}');
    expect(got.files['model.safetensors'].length).toBe(5020);
    expect(fs.readdirSync(path.join(run, 'checkpoints')).sort()).toEqual(['latest', 'step-00000020']);
  });

  it('a kill at every stage of a commit leaves the previous or the new checkpoint, never a mix', () => {
    for (const stage of STAGES) {
      for (let nth = 0; nth < 4; nth++) {
        const run = tmpDir();
        commitCheckpoint(run, 10, filesAt(10));
        let seen = 0;
        let killed = false;
        try {
          commitCheckpoint(run, 20, filesAt(20), { at: (s) => { if (s === stage && seen++ === nth) { killed = true; throw new Killed(); } } });
        } catch (e) {
          expect(e).toBeInstanceOf(Killed);
        }
        const got = readLatestCheckpoint(run)!;
        expect([10, 20]).toContain(got.step);
        const want = filesAt(got.step);
        for (const [name, c] of Object.entries(want)) {
          expect(Buffer.from(got.files[name]).equals(Buffer.from(typeof c === 'string' ? Buffer.from(c) : c)), `${stage}#${nth} ${name}`).toBe(true);
        }
        // Until `latest` is renamed the previous one is the committed one; after, the new one.
        expect(got.step).toBe(killed && stage !== 'prune' ? 10 : 20);
      }
    }
  });

  it('a full disk during a commit loses nothing already saved and names the file', () => {
    const run = tmpDir();
    commitCheckpoint(run, 10, filesAt(10));
    const enospc = Object.assign(new Error('ENOSPC: no space left on device'), { code: 'ENOSPC' });
    expect(() => commitCheckpoint(run, 20, filesAt(20), { at: (s, f) => { if (s === 'write-file' && f === 'optimizer.safetensors') throw enospc; } }))
      .toThrow(/ENOSPC|no space/);
    expect(readLatestCheckpoint(run)!.step).toBe(10);
    expect(fs.readdirSync(path.join(run, 'checkpoints')).sort()).toEqual(['latest', 'step-00000010']);
  });

  it('refuses truncated, corrupt and mixed checkpoints with the file named', () => {
    const run = tmpDir();
    commitCheckpoint(run, 10, filesAt(10));
    const dir = readLatestCheckpoint(run)!.dir;
    const model = path.join(dir, 'model.safetensors');
    fs.truncateSync(model, 1000);
    expect(() => readLatestCheckpoint(run)).toThrow(new RegExp(`${model.replace(/[/.]/g, '\\$&')} has 1000 bytes.*truncated`));
    fs.writeFileSync(model, new Uint8Array(5010).fill(7));
    expect(() => readLatestCheckpoint(run)).toThrow(/model\.safetensors does not match its checksum/);
    const other = tmpDir();
    commitCheckpoint(other, 11, filesAt(11));
    fs.copyFileSync(path.join(readLatestCheckpoint(other)!.dir, 'lab.json'), path.join(dir, 'lab.json'));
    fs.writeFileSync(model, filesAt(10)['model.safetensors']);
    expect(() => readLatestCheckpoint(run)).toThrow(CheckpointError);
    fs.rmSync(path.join(dir, 'manifest.json'));
    expect(() => readLatestCheckpoint(run)).toThrow(/manifest\.json is missing/);
  });

  it('the top-level export is all new or refused, never a mix, under a kill at any point', () => {
    for (let nth = 0; nth < 5; nth++) {
      const out = tmpDir();
      writeExport(out, 10, filesAt(10));
      let seen = 0;
      try {
        writeExport(out, 20, filesAt(20), { at: () => { if (seen++ === nth) throw new Killed(); } });
      } catch (e) {
        expect(e).toBeInstanceOf(Killed);
      }
      const got = readVerified(out);
      for (const [name, c] of Object.entries(filesAt(got.step))) {
        expect(Buffer.from(got.files[name]).equals(typeof c === 'string' ? Buffer.from(c) : Buffer.from(c))).toBe(true);
      }
    }
  });

  it('checks --out before anything is written', () => {
    const base = tmpDir();
    expect(() => checkOutDir(path.join(base, 'new', 'run'), { needBytes: 1000 })).not.toThrow();
    expect(fs.existsSync(path.join(base, 'new'))).toBe(false);
    fs.writeFileSync(path.join(base, 'x'), '1');
    expect(() => checkOutDir(base, { needBytes: 1000 })).toThrow(/is not empty.*--resume.*--overwrite/);
    expect(() => checkOutDir(base, { needBytes: 1000, overwrite: true })).not.toThrow();
    expect(() => checkOutDir(path.join(base, 'x'), { needBytes: 1 })).toThrow(/exists and is not a directory/);
    expect(() => checkOutDir(base, { needBytes: 1e18, resume: true })).toThrow(/free on its disk.*need/);
    expect(() => checkOutDir('/proc/self/lab-run', { needBytes: 1 })).toThrow(/cannot write in \/proc\/self/);
  });
});
