/**
 * The training loop: the one place that decides when a run steps, evaluates, samples, checkpoints,
 * pauses and stops. The CLI, the worker, the group controller and the headless peer call
 * runTraining with their trainer and only move what it reports (files, messages, store updates).
 *
 * Cadence, for a completed step s (0-based) of a run of `steps` steps:
 *  - evaluate when evalEvery > 0 and ((s+1) % evalEvery === 0 or s is the last step), then the
 *    quantization-error probe;
 *  - checkpoint when checkpointEvery > 0, (s+1) % checkpointEvery === 0 and s is not the last step;
 *    and once when the loop ends (checkpointAtEnd);
 *  - sample when sample.every > 0, (s+1) % sample.every === 0 and s is not the last step; and once
 *    at the end of a run that was not stopped (sample.atEnd).
 * Pause and stop are cooperative and checked between steps. A step submitted ahead (next: true,
 * only when nothing but the next step comes between) is settled and reported before a pause's
 * checkpoint and before the end.
 */
import type { CheckpointFiles } from '../io/checkpoint';
import type { QuantErrorRecord } from './probe';
import type { RunTrainer } from './run-trainer';

export type LoopPhase = 'training' | 'evaluating' | 'final evaluation' | 'sampling' | 'paused' | 'final sample' | 'saving checkpoint' | 'done';

export interface LoopSample {
  /** Sample after every this many steps (0: never in between). */
  every: number;
  /** Characters per sample (0: never sample). */
  length: number;
  /** Also sample once at the end of a run that was not stopped. */
  atEnd: boolean;
  prompt: string;
  temperature: number;
  /** The sampler's seed after step `step`. */
  seed(step: number): number;
}

export interface LoopCadence {
  /** Train until the trainer's stepIndex reaches this. */
  steps: number;
  evalEvery: number;
  checkpointEvery?: number;
  /** Checkpoint when the loop ends, unless the run resumed and took no step (its start is that checkpoint). */
  checkpointAtEnd?: boolean;
  /** The trainer was restored from a checkpoint. */
  resumed?: boolean;
  sample?: LoopSample;
}

/** Pause and stop requests, read between steps. */
export interface LoopControl {
  stopRequested(): boolean;
  pauseRequested?(): boolean;
  /** Resolves once the pause is lifted or a stop is requested. */
  whilePaused?(): Promise<void>;
}

export type CheckpointReason = 'every' | 'pause' | 'end';

export interface LoopHooks<M extends { step: number }> {
  /** Before a step is started (not for one already submitted ahead). */
  beforeStep?(step: number): void;
  /** A completed step, with the seconds from its start (or its settle) to its metrics. */
  onStep?(m: M, seconds: number): void | Promise<void>;
  onEval?(step: number, loss: number): void | Promise<void>;
  /** The probe after an evaluation (only when the trainer measures something). */
  onQuantErrors?(step: number, errors: QuantErrorRecord[]): void | Promise<void>;
  onSample?(step: number, text: string): void | Promise<void>;
  /** `step` is the trainer's stepIndex the checkpoint holds. */
  onCheckpoint?(step: number, files: CheckpointFiles, why: CheckpointReason): void | Promise<void>;
  /** `step`: the last completed step's index. */
  onPaused?(step: number): void | Promise<void>;
  onResumed?(): void | Promise<void>;
  onPhase?(phase: LoopPhase): void;
}

export interface LoopResult {
  /** The loop ended on a stop request before reaching `steps`. */
  stopped: boolean;
  /** The last completed step's index (start − 1 when none was taken). */
  lastStep: number;
  /** The last evaluation's loss (null when none ran). */
  lastEval: number | null;
}

const never = () => false;

/** Whether `s` is a step after which something with period `every` happens (0: never). */
const onPeriod = (s: number, every: number | undefined) => (every ?? 0) > 0 && (s + 1) % every! === 0;

/** Trains `trainer` to cadence.steps with the cadence above; rejects with the trainer's error. */
export async function runTraining<M extends { step: number }>(
  trainer: RunTrainer<M>, cadence: LoopCadence, hooks: LoopHooks<M> = {}, control: LoopControl = { stopRequested: never },
): Promise<LoopResult> {
  const { steps, evalEvery } = cadence;
  const sample = cadence.sample && cadence.sample.length > 0 ? cadence.sample : null;
  if (sample && !trainer.sample) throw new Error('this trainer cannot sample: set the sample length to 0');
  const start = trainer.stepIndex;
  const paused = control.pauseRequested ?? never;
  let lastStep = start - 1;
  let lastEval: number | null = null;
  let current: LoopPhase | null = null;
  const phase = (p: LoopPhase) => {
    if (p !== current) hooks.onPhase?.(p);
    current = p;
  };

  const report = async (m: M, t0: number) => {
    lastStep = m.step;
    await hooks.onStep?.(m, (performance.now() - t0) / 1000);
  };
  /** Completes a step submitted ahead (reported, counted); returns it, or null when none was. */
  const settle = async () => {
    const t0 = performance.now();
    const m = await trainer.settle();
    if (m) await report(m, t0);
    return m;
  };
  const checkpoint = async (why: CheckpointReason) => {
    phase('saving checkpoint');
    const files = await trainer.checkpoint();
    await hooks.onCheckpoint?.(trainer.stepIndex, files, why);
  };
  const isLast = (s: number) => s + 1 >= steps;
  const evalAfter = (s: number) => evalEvery > 0 && (onPeriod(s, evalEvery) || isLast(s));
  const sampleAfter = (s: number) => sample !== null && onPeriod(s, sample.every) && !isLast(s);
  const checkpointAfter = (s: number) => onPeriod(s, cadence.checkpointEvery) && !isLast(s);
  const drawSample = async (s: number) => {
    await hooks.onSample?.(s, await trainer.sample!(sample!.prompt, sample!.length, sample!.temperature, sample!.seed(s)));
  };
  /** What the cadence does after step s. */
  const afterStep = async (s: number) => {
    if (evalAfter(s)) {
      phase(isLast(s) ? 'final evaluation' : 'evaluating');
      lastEval = await trainer.evaluate();
      await hooks.onEval?.(s, lastEval);
      const errors = trainer.quantErrors ? await trainer.quantErrors() : [];
      if (errors.length) await hooks.onQuantErrors?.(s, errors);
    }
    if (checkpointAfter(s)) await checkpoint('every');
    if (sampleAfter(s)) {
      phase('sampling');
      await drawSample(s);
    }
  };

  while (trainer.stepIndex < steps && !control.stopRequested()) {
    phase('training');
    if (paused()) {
      // The step in flight is counted (and gets its evaluation, if due) before the pause's checkpoint.
      const ahead = await settle();
      if (ahead) await afterStep(ahead.step);
      await checkpoint('pause');
      phase('paused');
      await hooks.onPaused?.(lastStep);
      while (paused() && !control.stopRequested()) await control.whilePaused?.();
      if (control.stopRequested() || trainer.stepIndex >= steps) break;
      phase('training');
      await hooks.onResumed?.();
    }
    const s = trainer.stepIndex;
    hooks.beforeStep?.(s);
    // The next step goes in before this one's result is read only when nothing else comes between.
    const next = !isLast(s) && !evalAfter(s) && !sampleAfter(s) && !checkpointAfter(s);
    const t0 = performance.now();
    const m = await trainer.step({ next });
    await report(m, t0);
    await afterStep(m.step);
  }
  const stopped = trainer.stepIndex < steps || control.stopRequested();
  await settle();
  if (!stopped && sample?.atEnd) {
    phase('final sample');
    await drawSample(lastStep);
  }
  if (cadence.checkpointAtEnd && (trainer.stepIndex > start || !cadence.resumed)) await checkpoint('end');
  phase('done');
  return { stopped, lastStep, lastEval };
}
