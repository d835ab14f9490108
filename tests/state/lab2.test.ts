/** The multi-run lab's state: pause/resume, continuing from a checkpoint, persistence, exports. */
import { afterEach, describe, expect, it, vi } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, unsupportedFeatures } from '../../src/engine/scheme/scheme';
import { createLabStore } from '../../src/state/lab';
import { MemoryRepo, persistRuns, restoreRuns } from '../../src/state/persist';
import { RunController } from '../../src/state/runner';
import { canContinue, runCsv, runJson } from '../../src/state/runs';
import { launchRun } from '../../src/worker/client';
import { checkRunConfig, DEFAULT_RUN_CONFIG, type FromWorker, type RunConfig, ToWorkerSchema } from '../../src/worker/protocol';

const info = { adapter: 'x', params: 10, vocabSize: 65, memory: emptyMemReport() };
const metrics = (runId: string, step: number, loss: number): FromWorker => ({
  type: 'metrics', runId,
  metrics: { step, loss, lr: 1e-3, grad_norm: 1, tokens_per_s: 100 + step, mem: emptyMemReport(), elapsed_s: step * 2 },
});

class FakeWorker {
  posted: { type: string; [k: string]: unknown }[] = [];
  terminated = false;
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onerror: ((ev: ErrorEvent) => void) | null = null;
  onmessageerror: (() => void) | null = null;
  postMessage(m: { type: string }) { this.posted.push(m); }
  terminate() { this.terminated = true; }
  emit(msg: Partial<FromWorker>) { this.onmessage?.({ data: msg } as MessageEvent); }
}

afterEach(() => vi.useRealTimers());

function lab(repo = new MemoryRepo()) {
  const store = createLabStore();
  const workers: FakeWorker[] = [];
  const runs = new RunController(store, { corpusUrl: '/c', createWorker: () => { const w = new FakeWorker(); workers.push(w); return w as unknown as Worker; } }, repo);
  return { store, runs, workers, repo, s: () => store.getState() };
}

describe('run config with schemes', () => {
  it('accepts every preset scheme the engine supports and refuses unsupported features with a reason', () => {
    for (const [name, scheme] of Object.entries(SCHEME_PRESETS)) {
      const problem = checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme });
      // A preset may ask for something not executed yet, or a TP split micro cannot take; then the reason must name it.
      if (problem) expect(problem, name).toMatch(/does not implement|cannot split this model/);
    }
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: SCHEME_PRESETS.agoq })).toBeNull();
    // The engine's list of unsupported features grows and shrinks: whatever it says, the page says.
    const grads8 = parseScheme({ name: 'q-grads', grads: { storage: { format: 'int8' }, wire: { format: 'int8' } } });
    const u = unsupportedFeatures(grads8);
    if (u.length) expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: grads8 })).toContain(u[0]);
    else expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: grads8 })).toBeNull();
  });

  it('validates a custom model and passes a start with text and a checkpoint', () => {
    const bad = { ...DEFAULT_RUN_CONFIG, model: { vocab_size: 65, hidden_size: 30, intermediate_size: 64, num_hidden_layers: 1, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 32, rms_norm_eps: 1e-5, rope_theta: 1e4, tie_word_embeddings: true, initializer_range: 0.02 } };
    expect(checkRunConfig(bad)).toMatch(/divisible/);
    const files = { 'model.safetensors': new Uint8Array(8), 'config.json': '{}' };
    expect(ToWorkerSchema.safeParse({ type: 'start', runId: 'a', config: DEFAULT_RUN_CONFIG, text: 'abc', resume: { files, elapsed_s: 3 } }).success).toBe(true);
    expect(ToWorkerSchema.safeParse({ type: 'pause', runId: 'a' }).success).toBe(true);
  });
});

describe('several runs with pause, resume and stop', () => {
  it('runs three at once, each with its own worker; pause and resume only touch their run', async () => {
    const { runs, workers, s } = lab();
    const ids = ['fp32', 'agoq', 'agoq'].map((n) => runs.start({ ...DEFAULT_RUN_CONFIG, scheme: SCHEME_PRESETS[n] })!);
    expect(new Set(ids).size).toBe(3);
    expect(workers).toHaveLength(3);
    workers.forEach((w, i) => {
      w.emit({ type: 'ready', startStep: 0, info });
      w.emit(metrics(ids[i], 0, 4));
    });
    runs.pause(ids[1]);
    expect(s().runs[ids[1]].status).toBe('pausing');
    expect(workers[1].posted.at(-1)).toEqual({ type: 'pause', runId: ids[1] });
    workers[1].emit({ type: 'paused', step: 0 });
    expect(s().runs[ids[1]].status).toBe('paused');
    expect(s().runs[ids[0]].status).toBe('running');
    void runs.resume(ids[1]);
    expect(workers[1].posted.at(-1)).toEqual({ type: 'resume', runId: ids[1] });
    workers[1].emit({ type: 'resumed' });
    expect(s().runs[ids[1]].status).toBe('running');
    // An error in one run leaves the others going.
    workers[2].emit({ type: 'error', kind: 'oom', message: 'out of GPU memory' });
    await runs.journal.settled(); // the final state is stored before it shows
    expect(s().runs[ids[2]].status).toBe('error');
    expect(canContinue(s().runs[ids[2]])).toBe(false); // no checkpoint yet
    expect(s().runs[ids[0]].status).toBe('running');
    expect(workers[0].terminated).toBe(false);
    expect(s().runs[ids[1]].label).toMatch(/agoq/);
  });

  it('a paused run can still be stopped', async () => {
    vi.useFakeTimers();
    const { runs, workers, s } = lab();
    const id = runs.start(DEFAULT_RUN_CONFIG)!;
    workers[0].emit(metrics(id, 0, 4));
    runs.pause(id);
    workers[0].emit({ type: 'paused', step: 0 });
    runs.stop(id);
    expect(s().runs[id].status).toBe('stopping');
    expect(workers[0].posted.at(-1)).toEqual({ type: 'stop', runId: id });
    workers[0].emit({ type: 'done', step: 0, reason: 'stopped' });
    await runs.journal.settled();
    expect(s().runs[id].status).toBe('stopped');
  });
});

describe('persistence and continuing from a checkpoint', () => {
  it('saves changed runs, restores live ones as interrupted, and continues from the stored checkpoint', async () => {
    vi.useFakeTimers();
    const repo = new MemoryRepo();
    const a = lab(repo);
    const p = persistRuns(a.store, repo, () => {}, 100);
    const cfg: RunConfig = { ...DEFAULT_RUN_CONFIG, steps: 10, scheme: SCHEME_PRESETS.agoq };
    const done = a.runs.start({ ...cfg, steps: 1 })!;
    const live = a.runs.start(cfg, 'some picked text')!;
    const [w0, w1] = a.workers;
    w0.emit({ type: 'ready', startStep: 0, info });
    w0.emit(metrics(done, 0, 4));
    w0.emit({ type: 'checkpoint', step: 1, files: { 'model.safetensors': new Uint8Array([1]), 'config.json': '{}' } });
    w0.emit({ type: 'done', step: 0, reason: 'completed' });
    w1.emit({ type: 'ready', startStep: 0, info });
    for (let i = 0; i < 4; i++) w1.emit(metrics(live, i, 4 - i / 10));
    w1.emit({ type: 'val', step: 3, loss: 3.5 });
    w1.emit({ type: 'checkpoint', step: 4, files: { 'model.safetensors': new Uint8Array([2]), 'config.json': '{}' } });
    w1.emit(metrics(live, 4, 3.5));
    await vi.advanceTimersByTimeAsync(150);
    await p.flush();
    expect(repo.runs.size).toBe(2);
    expect(repo.texts.get(live)).toBe('some picked text');

    // "Reload": a fresh store and controller over the same repo.
    const b = lab(repo);
    expect(await restoreRuns(b.store, repo)).toBe(2);
    expect(b.s().runOrder).toEqual([done, live]);
    expect(b.s().runs[done].status).toBe('done');
    expect(b.s().runs[done].train).toHaveLength(1);
    const r = b.s().runs[live];
    expect(r.status).toBe('interrupted');
    expect(r.train).toHaveLength(5);
    expect(canContinue(r)).toBe(true);

    await b.runs.resume(live);
    expect(b.workers).toHaveLength(1);
    const start = b.workers[0].posted[0] as { type: string; text?: string; resume?: { files: Record<string, unknown>; elapsed_s: number } };
    expect(start.type).toBe('start');
    expect(start.text).toBe('some picked text');
    expect(start.resume?.files['model.safetensors']).toEqual(new Uint8Array([2]));
    expect(start.resume?.elapsed_s).toBe(6); // step 3's elapsed time: the last one the checkpoint covers
    expect(b.s().runs[live].status).toBe('starting');
    // The worker restarts at the checkpoint's step: later points are dropped, then re-run.
    b.workers[0].emit({ type: 'ready', startStep: 4, info });
    expect(b.s().runs[live].train.map((q) => q.step)).toEqual([0, 1, 2, 3]);
    expect(b.s().runs[live].val).toHaveLength(1);
    b.workers[0].emit(metrics(live, 4, 3.4));
    expect(b.s().runs[live].train.at(-1)?.loss).toBe(3.4);

    // Removing a run deletes it from storage too.
    b.runs.remove(done);
    const q = persistRuns(b.store, repo, () => {}, 100);
    b.store.getState().removeRun(done);
    await q.flush();
    p.stop();
    q.stop();
  });

  it('reports storage failures without losing the run', async () => {
    const repo = new MemoryRepo();
    repo.saveRun = () => Promise.reject(new Error('quota exceeded'));
    const { store, runs } = lab(repo);
    const errors: string[] = [];
    const p = persistRuns(store, repo, (m) => errors.push(m), 10);
    const id = runs.start(DEFAULT_RUN_CONFIG)!;
    await p.flush();
    expect(errors[0]).toMatch(/quota exceeded/);
    expect(store.getState().runs[id]).toBeDefined();
    p.stop();
  });
});

describe('exports', () => {
  it('writes metrics as CSV with validation loss on its step, and JSON with the config', () => {
    const { runs, workers, s } = lab();
    const id = runs.start({ ...DEFAULT_RUN_CONFIG, scheme: SCHEME_PRESETS.agoq })!;
    workers[0].emit(metrics(id, 0, 4));
    workers[0].emit(metrics(id, 1, 3.5));
    workers[0].emit({ type: 'val', step: 1, loss: 3.6 });
    const csv = runCsv(s().runs[id]).trim().split('\n');
    expect(csv[0]).toBe('step,loss,val_loss,lr,grad_norm,tokens_per_s,elapsed_s');
    expect(csv[1]).toBe('0,4,,0.001,1,100,0');
    expect(csv[2]).toBe('1,3.5,3.6,0.001,1,101,2');
    const json = JSON.parse(runJson(s().runs[id])) as { config: RunConfig; metrics: unknown[]; val: unknown[] };
    expect(json.config.scheme?.name).toBe('agoq');
    expect(json.metrics).toHaveLength(2);
    expect(json.val).toHaveLength(1);
  });

  it('client: pause/resume are sent to the worker; a start carries text instead of the URL when given', () => {
    const w = new FakeWorker();
    const h = launchRun('r', DEFAULT_RUN_CONFIG, () => {}, { corpusUrl: '/c', createWorker: () => w as unknown as Worker }, { text: 'hello' });
    expect(w.posted[0]).toEqual({ type: 'start', runId: 'r', config: DEFAULT_RUN_CONFIG, text: 'hello' });
    h.pause();
    h.resume();
    expect(w.posted.slice(1)).toEqual([{ type: 'pause', runId: 'r' }, { type: 'resume', runId: 'r' }]);
  });
});
