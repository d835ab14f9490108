/**
 * The training loop's cadence against a fake RunTrainer that records every call: evaluation,
 * sampling and checkpoints at their steps, the last step, submit-ahead only where nothing comes
 * between, pause / resume / stop between steps, a step in flight settled before a checkpoint, and
 * resuming from a start step.
 */
import { describe, expect, it } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import type { CheckpointFiles } from '../../src/engine/io/checkpoint';
import { type LoopCadence, type LoopControl, type LoopHooks, type LoopPhase, runTraining } from '../../src/engine/train/loop';
import type { RunTrainer } from '../../src/engine/train/run-trainer';

/** Submits ahead like Trainer: step({ next: true }) puts step s+1 in flight, uncounted. */
class FakeTrainer implements RunTrainer {
  calls: string[] = [];
  private count: number;
  private ahead: number | null = null;
  /** Called inside step() after the step is done (tests request a pause or stop there). */
  onStepped: (s: number) => void = () => {};

  constructor(start = 0, readonly canSample = true) {
    this.count = start;
    if (!canSample) this.sample = undefined;
  }

  get stepIndex(): number {
    return this.count;
  }

  async step(o: { next?: boolean } = {}): Promise<{ step: number }> {
    const s = this.ahead ?? this.count;
    this.ahead = o.next ? s + 1 : null;
    this.calls.push(`step ${s}${o.next ? ' +ahead' : ''}`);
    this.count = s + 1;
    this.onStepped(s);
    return { step: s };
  }

  async settle(): Promise<{ step: number } | null> {
    if (this.ahead === null) return null;
    const s = this.ahead;
    this.ahead = null;
    this.count = s + 1;
    this.calls.push(`settle ${s}`);
    return { step: s };
  }

  private expectSettled(what: string): void {
    if (this.ahead !== null) throw new Error(`${what} with step ${this.ahead} in flight`);
  }

  async evaluate(): Promise<number> {
    this.expectSettled('evaluate');
    this.calls.push(`eval @${this.count}`);
    return this.count / 100;
  }

  async quantErrors() {
    return [{ layer: 0, kind: 'x', error: this.count }] as never;
  }

  sample? = async (_p: string, _n: number, _t: number, seed: number): Promise<string> => {
    this.expectSettled('sample');
    this.calls.push(`sample @${this.count} seed ${seed}`);
    return `text${seed}`;
  };

  async checkpoint(): Promise<CheckpointFiles> {
    this.expectSettled('checkpoint');
    this.calls.push(`checkpoint @${this.count}`);
    return { 'config.json': `${this.count}` } as unknown as CheckpointFiles;
  }

  memory() {
    return emptyMemReport();
  }
}

/** Runs the loop, recording hook calls into the trainer's call list. */
async function run(t: FakeTrainer, cadence: LoopCadence, control?: LoopControl, extra: LoopHooks<{ step: number }> = {}) {
  const phases: LoopPhase[] = [];
  const hooks: LoopHooks<{ step: number }> = {
    onStep: (m) => void t.calls.push(`> step ${m.step}`),
    onEval: (s, l) => void t.calls.push(`> eval ${s} ${l}`),
    onQuantErrors: (s) => void t.calls.push(`> quant ${s}`),
    onSample: (s, text) => void t.calls.push(`> sample ${s} ${text}`),
    onCheckpoint: (s, _f, why) => void t.calls.push(`> checkpoint ${s} ${why}`),
    onPaused: (s) => void t.calls.push(`> paused ${s}`),
    onResumed: () => void t.calls.push('> resumed'),
    onPhase: (p) => void phases.push(p),
    ...extra,
  };
  const result = await runTraining(t, cadence, hooks, control);
  return { result, phases };
}

const steps = (calls: string[]) => calls.filter((c) => c.startsWith('step '));

describe('runTraining', () => {
  it('evaluates every N and at the last step once, submits ahead only between plain steps', async () => {
    const t = new FakeTrainer();
    const { result, phases } = await run(t, { steps: 7, evalEvery: 3, checkpointAtEnd: true });
    expect(t.calls).toEqual([
      'step 0 +ahead', '> step 0', 'step 1 +ahead', '> step 1', 'step 2', '> step 2', 'eval @3', '> eval 2 0.03', '> quant 2',
      'step 3 +ahead', '> step 3', 'step 4 +ahead', '> step 4', 'step 5', '> step 5', 'eval @6', '> eval 5 0.06', '> quant 5',
      'step 6', '> step 6', 'eval @7', '> eval 6 0.07', '> quant 6',
      'checkpoint @7', '> checkpoint 7 end',
    ]);
    expect(result).toEqual({ stopped: false, lastStep: 6, lastEval: 0.07 });
    expect(phases).toEqual(['training', 'evaluating', 'training', 'evaluating', 'training', 'final evaluation', 'saving checkpoint', 'done']);
  });

  it('a last step on the period is evaluated once; evalEvery 0 never evaluates', async () => {
    const t = new FakeTrainer();
    await run(t, { steps: 4, evalEvery: 2 });
    expect(t.calls.filter((c) => c.startsWith('eval'))).toEqual(['eval @2', 'eval @4']);
    const none = new FakeTrainer();
    const { result } = await run(none, { steps: 4, evalEvery: 0 });
    expect(none.calls.some((c) => c.startsWith('eval'))).toBe(false);
    expect(steps(none.calls)).toEqual(['step 0 +ahead', 'step 1 +ahead', 'step 2 +ahead', 'step 3']);
    expect(result.lastEval).toBeNull();
  });

  it('samples and checkpoints every N but not at the last step; samples once at the end', async () => {
    const t = new FakeTrainer();
    const sample = { every: 2, length: 10, atEnd: true, prompt: '\n', temperature: 0.8, seed: (s: number) => 100 + s };
    await run(t, { steps: 5, evalEvery: 0, checkpointEvery: 2, checkpointAtEnd: true, sample });
    expect(t.calls).toEqual([
      'step 0 +ahead', '> step 0', 'step 1', '> step 1', 'checkpoint @2', '> checkpoint 2 every', 'sample @2 seed 101', '> sample 1 text101',
      'step 2 +ahead', '> step 2', 'step 3', '> step 3', 'checkpoint @4', '> checkpoint 4 every', 'sample @4 seed 103', '> sample 3 text103',
      'step 4', '> step 4', 'sample @5 seed 104', '> sample 4 text104', 'checkpoint @5', '> checkpoint 5 end',
    ]);
  });

  it('pauses between steps: the step in flight settles and counts before the checkpoint, then resumes', async () => {
    const t = new FakeTrainer();
    let pause = false;
    let wake: (() => void) | null = null;
    t.onStepped = (s) => (pause ||= s === 1);
    const control: LoopControl = {
      stopRequested: () => false,
      pauseRequested: () => pause,
      whilePaused: () => new Promise<void>((r) => (wake = r)),
    };
    const done = run(t, { steps: 5, evalEvery: 0, checkpointAtEnd: true }, control);
    while (!wake) await new Promise((r) => setTimeout(r, 0));
    pause = false;
    (wake as () => void)();
    const { phases } = await done;
    expect(t.calls).toEqual([
      'step 0 +ahead', '> step 0', 'step 1 +ahead', '> step 1',
      'settle 2', '> step 2', 'checkpoint @3', '> checkpoint 3 pause', '> paused 2', '> resumed',
      'step 3 +ahead', '> step 3', 'step 4', '> step 4', 'checkpoint @5', '> checkpoint 5 end',
    ]);
    expect(phases).toEqual(['training', 'saving checkpoint', 'paused', 'training', 'saving checkpoint', 'done']);
  });

  it('a step settled by a pause still gets its evaluation', async () => {
    const t = new FakeTrainer();
    let pause = false;
    t.onStepped = (s) => (pause ||= s === 0);
    const control: LoopControl = { stopRequested: () => false, pauseRequested: () => pause, whilePaused: async () => void (pause = false) };
    await run(t, { steps: 4, evalEvery: 2 }, control);
    expect(t.calls.slice(0, 6)).toEqual(['step 0 +ahead', '> step 0', 'settle 1', '> step 1', 'eval @2', '> eval 1 0.02']);
  });

  it('stops between steps: the step in flight is reported, no final sample, a checkpoint at the end', async () => {
    const t = new FakeTrainer();
    let stop = false;
    t.onStepped = (s) => (stop ||= s === 1);
    const sample = { every: 0, length: 10, atEnd: true, prompt: '', temperature: 1, seed: () => 0 };
    const { result } = await run(t, { steps: 10, evalEvery: 5, checkpointAtEnd: true, sample }, { stopRequested: () => stop });
    expect(t.calls).toEqual(['step 0 +ahead', '> step 0', 'step 1 +ahead', '> step 1', 'settle 2', '> step 2', 'checkpoint @3', '> checkpoint 3 end']);
    expect(result).toEqual({ stopped: true, lastStep: 2, lastEval: null });
  });

  it('a stop during a pause ends the run without resuming', async () => {
    const t = new FakeTrainer();
    let stop = false;
    const control: LoopControl = { stopRequested: () => stop, pauseRequested: () => true, whilePaused: async () => void (stop = true) };
    const { result } = await run(t, { steps: 3, evalEvery: 0, checkpointAtEnd: true }, control);
    expect(t.calls).toEqual(['checkpoint @0', '> checkpoint 0 pause', '> paused -1', 'checkpoint @0', '> checkpoint 0 end']);
    expect(result.stopped).toBe(true);
  });

  it('resumes from a start step: the cadence counts from step 0, no end checkpoint when nothing was trained', async () => {
    const t = new FakeTrainer(4);
    await run(t, { steps: 7, evalEvery: 3, checkpointAtEnd: true, resumed: true });
    expect(t.calls).toEqual([
      'step 4 +ahead', '> step 4', 'step 5', '> step 5', 'eval @6', '> eval 5 0.06', '> quant 5',
      'step 6', '> step 6', 'eval @7', '> eval 6 0.07', '> quant 6', 'checkpoint @7', '> checkpoint 7 end',
    ]);
    const finished = new FakeTrainer(7);
    const { result } = await run(finished, { steps: 7, evalEvery: 3, checkpointAtEnd: true, resumed: true });
    expect(finished.calls).toEqual([]);
    expect(result).toEqual({ stopped: false, lastStep: 6, lastEval: null });
  });

  it('refuses to sample with a trainer that cannot', async () => {
    const t = new FakeTrainer(0, false);
    const sample = { every: 2, length: 5, atEnd: false, prompt: '', temperature: 1, seed: () => 0 };
    await expect(run(t, { steps: 3, evalEvery: 0, sample })).rejects.toThrow(/cannot sample/);
    expect(t.calls).toEqual([]);
  });
});
