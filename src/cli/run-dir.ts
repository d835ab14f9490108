/**
 * A training run's directory, as the train CLI and the headless peer write it:
 *   run.json        every resolved setting (what --resume reads back);
 *   metrics.jsonl   one JSON line per step, evaluation and probe;
 *   checkpoints/    the resumable state (checkpoint-store.ts: committed folders, `latest`);
 *   model.safetensors, config.json, optimizer.safetensors, lab.json, manifest.json
 *                   the finished run's Hugging Face export.
 * Every write failure names the file (a full disk, a read-only mount).
 */
import * as fs from 'node:fs';
import path from 'node:path';
import type { CheckpointFiles } from '../engine/io/checkpoint';
import { commitCheckpoint, fsError, MANIFEST, type StoreHooks, writeExport } from './checkpoint-store';

/** What a run writes into its directory (all that --overwrite removes; other files stay). */
const RUN_FILES = ['run.json', 'metrics.jsonl', 'checkpoints', 'init', 'batches.npy', 'model.safetensors', 'config.json',
  'optimizer.safetensors', 'lab.json', MANIFEST];

/**
 * Disk a run of `params` parameters needs at once: two committed checkpoints (the previous stays
 * until the new one is whole) and the export, each weights + two Adam moments in fp32, plus slack.
 */
export function runDiskBytes(params: number): number {
  return 3 * params * 4 * 3 + (1 << 20);
}

export class RunDir {
  readonly metricsPath: string;

  constructor(readonly dir: string, private readonly hooks: StoreHooks = {}) {
    this.metricsPath = path.join(dir, 'metrics.jsonl');
  }

  /** Creates the directory; with `overwrite`, first removes the files a previous run wrote there. */
  create(o: { overwrite?: boolean } = {}): void {
    if (o.overwrite) for (const f of RUN_FILES) fs.rmSync(path.join(this.dir, f), { recursive: true, force: true });
    try {
      fs.mkdirSync(this.dir, { recursive: true });
    } catch (e) {
      throw fsError(e, 'could not create', this.dir);
    }
  }

  /** Writes `name` whole or not at all (a temporary name, then a rename). */
  writeFile(name: string, content: string | Uint8Array): void {
    const file = path.join(this.dir, name);
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}`;
    try {
      fs.writeFileSync(tmp, content);
      fs.renameSync(tmp, file);
    } catch (e) {
      fs.rmSync(tmp, { force: true });
      throw fsError(e, 'could not write', file);
    }
  }

  writeRunInfo(info: object): void {
    this.writeFile('run.json', JSON.stringify(info, null, 2) + '\n');
  }

  /**
   * Starts metrics.jsonl: empty for a new run; for a run resumed with `stepsDone` steps, only the
   * lines of those steps are kept (a line of a later step, or one cut by a kill, would repeat or break).
   */
  openMetrics(stepsDone: number | null): void {
    let kept = '';
    if (stepsDone !== null && fs.existsSync(this.metricsPath)) {
      kept = fs.readFileSync(this.metricsPath, 'utf8').split('\n').filter((line) => {
        let m: { step?: unknown; loss?: unknown };
        try {
          m = JSON.parse(line) as typeof m;
        } catch {
          return false;
        }
        // Step lines carry the step's index; evaluation and probe lines the number of steps done.
        return typeof m.step === 'number' && ('loss' in m ? m.step < stepsDone : m.step <= stepsDone);
      }).map((l) => l + '\n').join('');
    }
    this.writeFile('metrics.jsonl', kept);
  }

  metric(m: object): void {
    try {
      fs.appendFileSync(this.metricsPath, JSON.stringify(m) + '\n');
    } catch (e) {
      throw fsError(e, 'could not write', this.metricsPath);
    }
  }

  /** Commits the resumable state at `step`; the previous checkpoint stays until this one is whole. */
  checkpoint(step: number, files: CheckpointFiles): void {
    commitCheckpoint(this.dir, step, { ...files }, this.hooks);
  }

  /** The finished run: its state committed first, then the top-level export (a failure there loses no step). */
  finish(step: number, files: CheckpointFiles): void {
    this.checkpoint(step, files);
    this.export(step, files);
  }

  export(step: number, files: CheckpointFiles | Record<string, Uint8Array>): void {
    writeExport(this.dir, step, { ...files }, this.hooks);
  }
}
