/**
 * Connects the store to training workers: one worker per run, its messages folded into the store,
 * its checkpoints kept (in memory for downloads, and in the repo for reloads). The worker handles
 * live here, not in the store, because they are not data.
 */
import { launchRun, type LaunchData, type LaunchOptions, type RunHandle } from '../worker/client';
import { GenerateClient, type Generation } from '../worker/generate-client';
import type { FromGenerate, GenerateParams } from '../worker/generate-protocol';
import { checkRunConfig, type CheckpointBlob, type FromWorker, type RunConfig } from '../worker/protocol';
import type { LabStore } from './lab';
import { RunJournal, type RunRepo } from './persist';
import { canContinue } from './runs';

export class RunController {
  private handles = new Map<string, RunHandle>();
  private checkpoints = new Map<string, CheckpointBlob>();
  /** The generation worker, started on the first Generate. */
  private generator: GenerateClient | null = null;
  /** Folds worker messages into the store, checkpoints and final states stored first. */
  readonly journal: RunJournal;

  constructor(
    private readonly store: LabStore,
    private readonly launch: Omit<LaunchOptions, 'createWorker'> & { createWorker?: () => Worker; createGenerateWorker?: () => Worker },
    private readonly repo: RunRepo | null = null,
    /** The files of the checkpoint a config starts from (config.init), which travel beside it. */
    private readonly initFiles: (config: RunConfig) => Blob[] | undefined = () => undefined,
  ) {
    this.journal = new RunJournal(store, repo);
  }

  /**
   * Starts a run with `config` and its picked `text` (none: the bundled text or prepared data), by
   * default the form's draft and its text; returns its id, or null if invalid.
   */
  start(config?: RunConfig, text?: string): string | null {
    const s = this.store.getState();
    // The draft's text goes only with the draft: a queued run or a baseline on the bundled text must
    // not train on a file picked since.
    if (config === undefined) [config, text] = [s.draft, s.draftText?.text];
    const problem = checkRunConfig(config);
    if (problem) {
      s.reportAppError(`Cannot start: ${problem}`);
      return null;
    }
    const id = s.addRun(config);
    if (text !== undefined) this.saveQuietly(() => this.repo?.saveText(id, text));
    let init: Blob[] | undefined;
    if (config.init) {
      init = this.initFiles(config);
      if (!init) {
        s.reportAppError(`Cannot start: the checkpoint ${config.init.name} is no longer loaded; drop it again`);
        s.removeRun(id);
        return null;
      }
    }
    this.spawn(id, config, { text, init });
    return id;
  }

  private spawn(id: string, config: RunConfig, data: LaunchData): void {
    try {
      const handle = launchRun(id, config, (msg) => this.onMessage(id, msg), this.launch, data);
      this.handles.set(id, handle);
    } catch (e) {
      this.store.getState().applyMessage({ type: 'error', runId: id, kind: 'error', message: `could not start the training worker: ${(e as Error).message}` });
    }
  }

  private onMessage(id: string, msg: FromWorker): void {
    if (msg.type === 'checkpoint') this.checkpoints.set(id, msg.files);
    this.journal.receive(msg);
    if (msg.type === 'done' || msg.type === 'error') this.handles.delete(id);
  }

  private saveQuietly(fn: () => Promise<void> | undefined): void {
    fn()?.catch((e: unknown) => this.store.getState().reportAppError(`Could not save to this browser's storage: ${(e as Error).message}`));
  }

  stop(runId: string): void {
    const h = this.handles.get(runId);
    if (!h) return;
    this.store.getState().markStopping(runId);
    h.stop();
  }

  pause(runId: string): void {
    const h = this.handles.get(runId);
    if (!h) return;
    this.store.getState().markPausing(runId);
    h.pause();
  }

  /** Resumes a paused run in its worker, or continues an interrupted/stopped run from its checkpoint. */
  async resume(runId: string): Promise<void> {
    const h = this.handles.get(runId);
    if (h) {
      h.resume();
      return;
    }
    const run = this.store.getState().runs[runId];
    if (!run || !canContinue(run)) return;
    const files = this.checkpoints.get(runId) ?? (await this.repo?.loadCheckpoint(runId));
    if (!files) {
      this.store.getState().reportAppError(`Run ${run.label} has no stored checkpoint to continue from.`);
      return;
    }
    const text = (await this.repo?.loadText(runId)) ?? undefined;
    const elapsed = run.train.filter((p) => p.step < (run.checkpointStep ?? 0)).at(-1)?.elapsed_s ?? 0;
    this.store.getState().markContinuing(runId);
    this.spawn(runId, run.config, { text, resume: { files, elapsed_s: elapsed } });
  }

  /** The latest checkpoint of a run (this session's, else the stored one). */
  async checkpoint(runId: string): Promise<CheckpointBlob | undefined> {
    return this.checkpoints.get(runId) ?? (await this.repo?.loadCheckpoint(runId));
  }

  /**
   * Generates from the run's latest checkpoint in the generation worker; events go to `on`.
   * Null (and the reason as an error event) when the run has no checkpoint yet.
   */
  async generate(runId: string, params: GenerateParams, on: (msg: FromGenerate) => void): Promise<Generation | null> {
    const files = await this.checkpoint(runId);
    if (!files) {
      on({ type: 'error', id: -1, message: 'this run has no checkpoint yet' });
      return null;
    }
    const step = this.store.getState().runs[runId]?.checkpointStep ?? 'unknown';
    return this.generateFrom(`${runId}@${step}`, files, params, on);
  }

  /** Generates from checkpoint files (an imported model); `key` names them, so the same ones are not rebuilt. */
  generateFrom(key: string, files: CheckpointBlob, params: GenerateParams, on: (msg: FromGenerate) => void): Generation {
    this.generator ??= new GenerateClient(this.launch.createGenerateWorker);
    return this.generator.generate(key, files, params, on);
  }

  remove(runId: string): void {
    this.handles.get(runId)?.dispose();
    this.handles.delete(runId);
    this.checkpoints.delete(runId);
    this.store.getState().removeRun(runId);
  }

  disposeAll(): void {
    for (const h of this.handles.values()) h.dispose();
    this.handles.clear();
    this.generator?.dispose();
    this.generator = null;
  }
}
