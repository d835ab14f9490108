/** The comparison's baseline (fp32 or f16 mixed precision), its persistence, and starting a missing one. */
import { describe, expect, it } from 'vitest';
import { emptyMemReport } from '../../src/engine/gpu/memory';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import {
  baselineConfig, baselineDelta, baselineRows, f16BaselineCaveat, findBaseline, resolveBaseline, trainsAs,
} from '../../src/state/baseline';
import { createLabStore, type GpuSupport } from '../../src/state/lab';
import { MemoryRepo } from '../../src/state/persist';
import { runQueue, submitRun } from '../../src/state/queue';
import { RunController } from '../../src/state/runner';
import { newRun, type RunState } from '../../src/state/runs';
import { persistSettings, readSettings, SETTINGS_KEY } from '../../src/state/settings';
import { DEFAULT_RUN_CONFIG, type RunConfig } from '../../src/worker/protocol';

const withF16: GpuSupport = { state: 'available', adapter: 'x', shaderF16: true };
const noF16: GpuSupport = { state: 'available', adapter: 'x', shaderF16: false };

const cfg = (patch: Partial<RunConfig> = {}): RunConfig => ({ ...DEFAULT_RUN_CONFIG, ...patch });
/** A run with train losses at steps 0..n-1 (loss(step)), memory and tokens/s. */
function run(id: string, config: RunConfig, o: { n?: number; loss?: (s: number) => number; mem?: number; tps?: number; val?: [number, number][] } = {}): RunState {
  const r = newRun(id, config, 0);
  const loss = o.loss ?? (() => 3);
  const train = Array.from({ length: o.n ?? 0 }, (_, s) => ({ step: s, loss: loss(s), lr: 1e-3, grad_norm: 1, tokens_per_s: o.tps ?? 100 }));
  const mem = { ...emptyMemReport(), total: o.mem ?? 1000 };
  return { ...r, train, val: (o.val ?? []).map(([step, l]) => ({ step, loss: l })), info: { adapter: 'x', params: 1, vocabSize: 65, memory: mem } };
}

class MemoryStorage {
  map = new Map<string, string>();
  failWrites = false;
  getItem(k: string) { return this.map.get(k) ?? null; }
  setItem(k: string, v: string) {
    if (this.failWrites) throw new Error('QuotaExceededError');
    this.map.set(k, v);
  }
}

describe('the comparison baseline', () => {
  it('auto is f16 where the device has shader-f16, fp32 elsewhere (and while checking); an explicit choice stands', () => {
    expect(resolveBaseline('auto', withF16)).toBe('f16');
    expect(resolveBaseline('auto', noF16)).toBe('fp32');
    expect(resolveBaseline('auto', { state: 'checking' })).toBe('fp32');
    const none: GpuSupport = { state: 'unavailable', reason: 'no-api', detail: '' };
    expect(resolveBaseline('auto', none)).toBe('fp32');
    expect(resolveBaseline('fp32', withF16)).toBe('fp32');
    expect(resolveBaseline('f16', noF16)).toBe('f16');
  });

  it('a baseline is the same problem under the baseline\'s scheme: config, scheme match (renamed presets count), not itself', () => {
    const agoq = cfg({ scheme: SCHEME_PRESETS.agoq, steps: 300 });
    expect(baselineConfig(agoq, 'fp32')).toEqual({ ...DEFAULT_RUN_CONFIG, steps: 300 });
    expect(baselineConfig(agoq, 'f16')).toEqual({ ...DEFAULT_RUN_CONFIG, steps: 300, scheme: SCHEME_PRESETS.f16 });
    expect(trainsAs(cfg(), 'fp32')).toBe(true);
    expect(trainsAs(cfg({ scheme: SCHEME_PRESETS.fp32 }), 'fp32')).toBe(true);
    expect(trainsAs(cfg({ scheme: { ...SCHEME_PRESETS.f16, name: 'my f16' } }), 'f16')).toBe(true);
    expect(trainsAs(cfg({ scheme: SCHEME_PRESETS['int8-f16'] }), 'f16')).toBe(false);

    const a = run('a', agoq, { n: 5 });
    const f16short = run('f1', cfg({ scheme: SCHEME_PRESETS.f16 }), { n: 3 });
    const f16long = run('f2', cfg({ scheme: SCHEME_PRESETS.f16, steps: 50 }), { n: 8 }); // other steps/cadence: still its baseline
    const otherBatch = run('f3', cfg({ scheme: SCHEME_PRESETS.f16, batch: 4 }), { n: 20 });
    const otherSeed = run('f4', cfg({ scheme: SCHEME_PRESETS.f16, seed: 1 }), { n: 20 });
    const fp32 = run('p', cfg(), { n: 2 });
    const all = [a, f16short, f16long, otherBatch, otherSeed, fp32];
    expect(findBaseline(a, all, 'f16')?.id).toBe('f2');
    expect(findBaseline(a, all, 'fp32')?.id).toBe('p');
    expect(findBaseline(f16long, all, 'f16')?.id).toBe('f1'); // another f16 run, never itself
    // A baseline just started (no step yet) counts, so the page does not offer a second.
    const pending = run('f5', cfg({ scheme: SCHEME_PRESETS.f16, lr: 1e-2 }));
    expect(findBaseline(run('b', cfg({ scheme: SCHEME_PRESETS.agoq, lr: 1e-2 })), [pending], 'f16')?.id).toBe('f5');
  });

  it('deltas: validation loss at the last step both evaluated (else the mean of the last 10 common train steps), memory, median tokens/s', () => {
    const base = run('f', cfg({ scheme: SCHEME_PRESETS.f16 }), { n: 20, loss: () => 2, mem: 1000, tps: 200, val: [[10, 2], [19, 2.5]] });
    const r = run('a', cfg({ scheme: SCHEME_PRESETS.agoq }), { n: 30, loss: () => 2.2, mem: 400, tps: 100, val: [[10, 2.1], [19, 2.6], [29, 2]] });
    const d = baselineDelta(r, base);
    expect(d.lossOn).toBe('val');
    expect(d.lossStep).toBe(19);
    expect(d.lossPct).toBeCloseTo(4, 10);
    expect(d.memoryPct).toBeCloseTo(-60, 10);
    expect(d.speedRatio).toBe(0.5);
    // No common evaluation: train loss over the last 10 common steps (steps 10-19 here).
    const t = baselineDelta({ ...r, val: [] }, { ...base, train: base.train.map((p) => ({ ...p, loss: p.step >= 10 ? 2 : 100 })) });
    expect(t).toMatchObject({ lossOn: 'train', lossStep: 19 });
    expect(t.lossPct).toBeCloseTo(10, 10);
    // Nothing to compare yet.
    expect(baselineDelta(run('x', cfg(), { mem: 0 }), run('y', cfg()))).toEqual({ lossPct: null, lossOn: null, lossStep: null, memoryPct: null, speedRatio: null });
  });

  it('rows: every run not under the baseline\'s scheme, with its baseline or the one config to start (once per problem, not when queued)', () => {
    const a = run('a', cfg({ scheme: SCHEME_PRESETS.agoq }), { n: 3 });
    const b = run('b', cfg({ scheme: SCHEME_PRESETS.taco }), { n: 3 });
    const c = run('c', cfg({ scheme: SCHEME_PRESETS.agoq, batch: 4 }), { n: 3 });
    const fp32 = run('p', cfg(), { n: 3 });
    const rows = baselineRows([a, b, c, fp32], 'f16');
    expect(rows.map((r) => r.run.id)).toEqual(['a', 'b', 'c', 'p']); // fp32 is compared with f16 too
    expect(rows.every((r) => r.base === null && r.delta === null)).toBe(true);
    expect(new Set(rows.map((r) => r.missing!.key)).size).toBe(2); // a, b and p share one f16 baseline; c has its own
    expect(rows[2].missing!.config).toEqual({ ...c.config, scheme: SCHEME_PRESETS.f16 });
    const f16 = run('f', cfg({ scheme: SCHEME_PRESETS.f16 }), { n: 3 });
    const with16 = baselineRows([a, b, c, fp32, f16], 'f16');
    expect(with16.map((r) => r.run.id)).toEqual(['a', 'b', 'c', 'p']);
    expect(with16.map((r) => r.base?.id ?? null)).toEqual(['f', 'f', null, 'f']);
    expect(with16[0].delta?.lossPct).toBe(0);
    expect(baselineRows([c], 'f16', [baselineConfig(c.config, 'f16')])[0].missing).toBeNull();
    // Against fp32 the f16 run is a row and the fp32 one the baseline.
    expect(baselineRows([fp32, f16], 'fp32').map((r) => [r.run.id, r.base?.id])).toEqual([['f', 'p']]);
  });

  it('says when an f16 baseline is no mixed-precision run on this device', () => {
    expect(f16BaselineCaveat('f16', noF16)).toMatch(/no shader-f16.*computes in fp32.*twin/);
    expect(f16BaselineCaveat('f16', withF16)).toBeNull();
    expect(f16BaselineCaveat('fp32', noF16)).toBeNull();
  });
});

describe('lab settings', () => {
  it('the baseline choice and "one run at a time" survive a reload; bad or missing values fall back field by field', () => {
    const storage = new MemoryStorage();
    const a = createLabStore();
    const stop = persistSettings(a, storage);
    expect(a.getState().baseline).toBe('auto');
    a.getState().setBaseline('fp32');
    a.getState().setQueueRuns(true);
    stop();
    expect(JSON.parse(storage.getItem(SETTINGS_KEY)!)).toEqual({ baseline: 'fp32', queueRuns: true });
    const b = createLabStore();
    persistSettings(b, storage);
    expect([b.getState().baseline, b.getState().queueRuns]).toEqual(['fp32', true]);

    storage.setItem(SETTINGS_KEY, JSON.stringify({ baseline: 'bf16', queueRuns: true }));
    expect(readSettings(storage)).toEqual({ baseline: 'auto', queueRuns: true });
    storage.setItem(SETTINGS_KEY, '{not json');
    expect(readSettings(storage)).toEqual({ baseline: 'auto', queueRuns: false });
    expect(readSettings(null)).toEqual({ baseline: 'auto', queueRuns: false });
  });

  it('a storage that refuses writes costs persistence only, said once', () => {
    const storage = new MemoryStorage();
    storage.failWrites = true;
    const errors: string[] = [];
    const s = createLabStore();
    persistSettings(s, storage, (m) => errors.push(m));
    s.getState().setBaseline('f16');
    s.getState().setBaseline('fp32');
    expect(s.getState().baseline).toBe('fp32');
    expect(errors).toEqual([expect.stringMatching(/will not survive a reload: QuotaExceededError/)]);
  });
});

describe('starting a missing baseline', () => {
  it('starts at once, or queues behind the run in progress when "one run at a time" is on', () => {
    const store = createLabStore();
    const s = () => store.getState();
    const started: RunConfig[] = [];
    const runs = { start: (c?: RunConfig) => { started.push(c!); return s().addRun(c!); } };
    const stop = runQueue(store, runs);
    const base = baselineConfig(cfg({ scheme: SCHEME_PRESETS.agoq }), 'f16');
    submitRun(store, runs, base);
    expect(started).toEqual([base]);
    s().setQueueRuns(true);
    submitRun(store, runs, { ...base, seed: 2 });
    expect(s().queued.map((q) => q.config.seed)).toEqual([2]);
    stop();
  });

  it('a run started with a config of its own does not take the file picked in the form (the bundled text stays the bundled text)', () => {
    const store = createLabStore();
    const posted: { type: string; text?: string }[] = [];
    const worker = { postMessage: (m: { type: string; text?: string }) => posted.push(m), terminate() {}, onmessage: null, onerror: null, onmessageerror: null };
    const runs = new RunController(store, { corpusUrl: '/c', createWorker: () => worker as unknown as Worker }, new MemoryRepo());
    store.getState().setDraftText({ name: 'mine.txt', text: 'picked' });
    runs.start(baselineConfig(cfg({ scheme: SCHEME_PRESETS.agoq }), 'f16'));
    runs.start(); // the draft: its picked text
    runs.start(cfg({ dataset: 'other.txt' }), 'other text');
    expect(posted.filter((m) => m.type === 'start').map((m) => m.text)).toEqual([undefined, 'picked', 'other text']);
  });
});
