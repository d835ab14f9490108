import * as fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { readLatestCheckpoint, readVerified } from '../../src/cli/checkpoint-store';
import { RunDir } from '../../src/cli/run-dir';
import type { CheckpointFiles } from '../../src/engine/io/checkpoint';

const dirs: string[] = [];
const tmpDir = () => {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'rundir-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

const filesAt = (step: number): CheckpointFiles => ({
  'model.safetensors': new Uint8Array(4000 + step).fill(step),
  'optimizer.safetensors': new Uint8Array(8000 + step).fill(step + 1),
  'config.json': `{"step": ${step}}`,
  'lab.json': JSON.stringify({ step }),
});
const enospc = () => Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC' });

describe('RunDir', () => {
  it('a full disk during the final export keeps the final checkpoint and names the file', () => {
    const d = tmpDir();
    // The store's hooks run in the commit and in the export: fail only once step 20 is committed (in the export).
    const run = new RunDir(d, { at: (stage, file) => {
      if (stage === 'write-file' && file === 'optimizer.safetensors' && readLatestCheckpoint(d)?.step === 20) throw enospc();
    } });
    run.create();
    run.checkpoint(10, filesAt(10));
    expect(() => run.finish(20, filesAt(20))).toThrow(/no space/);
    expect(readLatestCheckpoint(d)!.step).toBe(20);
    expect(() => readVerified(d)).toThrow(/manifest.json is missing/);
  });

  it('a full disk in the final commit loses nothing already saved; write errors name the file', () => {
    const d = tmpDir();
    new RunDir(d).checkpoint(10, filesAt(10));
    const run = new RunDir(d, { at: (stage, file) => { if (stage === 'write-file' && file === 'model.safetensors') throw enospc(); } });
    expect(() => run.finish(20, filesAt(20))).toThrow(/ENOSPC|no space/);
    expect(readLatestCheckpoint(d)!.step).toBe(10);
    expect(fs.readdirSync(path.join(d, 'checkpoints')).sort()).toEqual(['latest', 'step-00000010']);
    // metrics.jsonl where a file blocks the directory: the message names the file.
    fs.writeFileSync(path.join(d, 'blocker'), '');
    expect(() => new RunDir(path.join(d, 'blocker')).metric({ step: 0 })).toThrow(/could not write .*blocker.metrics\.jsonl/);
  });

  it('a resumed run keeps only the metrics of the steps its checkpoint holds', () => {
    const d = tmpDir();
    const run = new RunDir(d);
    run.create();
    run.openMetrics(null);
    for (let s = 0; s < 6; s++) run.metric({ step: s, loss: s });
    run.metric({ step: 4, val_loss: 1 });
    run.metric({ step: 6, val_loss: 2 });
    fs.appendFileSync(run.metricsPath, '{"step": 6, "lo'); // cut by a kill
    run.openMetrics(4);
    const kept = fs.readFileSync(run.metricsPath, 'utf8').trim().split('\n').map((l) => JSON.parse(l) as object);
    expect(kept).toEqual([{ step: 0, loss: 0 }, { step: 1, loss: 1 }, { step: 2, loss: 2 }, { step: 3, loss: 3 }, { step: 4, val_loss: 1 }]);
  });

  it('--overwrite removes only the files a run writes', () => {
    const d = tmpDir();
    const run = new RunDir(d);
    run.create();
    run.finish(3, filesAt(3));
    run.writeRunInfo({ x: 1 });
    fs.writeFileSync(path.join(d, 'notes.txt'), 'mine');
    run.create({ overwrite: true });
    expect(fs.readdirSync(d)).toEqual(['notes.txt']);
  });
});
