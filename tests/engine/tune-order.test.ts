// The tuner's schedule (tune/tuner.ts): a job's checks and builds all come before its timings, the
// clock is raised on the first candidate (the untuned pick), then the candidates are timed
// interleaved in rounds and the rounds' scores decide, the untuned pick kept unless another is
// faster by keepMargin. The GEMM job's preparation and the GPU timer are replaced by stand-ins that
// log what is asked of them: the schedule is the unit here, not the kernels.
import { beforeEach, describe, expect, it, vi } from 'vitest';
import type { Dispatch, Runtime } from '../../src/engine/gpu/runtime';
import type { Candidate, PreparedJob } from '../../src/engine/tune/candidate';
import type { MatmulJob } from '../../src/engine/tune/jobs';

const log: string[] = [];
/** A candidate's true ms a run, and the clock: a factor on every timing, from the count of timings so far. */
let trueMs: Record<string, number> = {};
let clock = (_timings: number) => 1;
let timings = 0;
const nameOf = (ds: Dispatch[]) => (ds[0] as unknown as { label: string }).label;

vi.mock('../../src/engine/gpu/timer', async (orig) => ({
  ...(await orig<object>()),
  // A round is one sequence (one submit on a GPU): each item logged as it is timed, a first use marked.
  timeSequence: async (_rt: Runtime, items: { dispatches: Dispatch[]; warmup?: number }[]) => items.map((it) => {
    log.push(`time ${nameOf(it.dispatches)}${it.warmup ? ' (first use)' : ''}`);
    return trueMs[nameOf(it.dispatches)] * clock(timings++);
  }),
  warmUntilSteady: async (_rt: Runtime, ds: Dispatch[], minMs: number) => (log.push(`settle ${nameOf(ds)} ${minMs} ms`), { runs: 1, ms: 1, batchMsPerRun: [1] }),
}));

vi.mock('../../src/engine/tune/gemm', async (orig) => ({
  ...(await orig<object>()),
  prepareMatmul: (_rt: Runtime, job: MatmulJob): PreparedJob => ({
    job, rejected: [],
    candidates: ['a', 'b', 'c', 'bad'].map((name): Candidate => ({
      name,
      check: async () => (log.push(`check ${name}`), name === 'bad' ? 'wrong' : null),
      build: async () => (log.push(`build ${name}`), { dispatches: [{ label: name }] as unknown as Dispatch[], inner: 1, free: () => {} }),
    })),
    picks: (times) => [...times].sort((x, y) => x[1] - y[1]).map(([n]) => n),
    free: () => {},
  }),
}));

const { tuneJobs, tunedJobWords } = await import('../../src/engine/tune/tuner');
const { TuneCache } = await import('../../src/engine/tune');

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100' };
const rt = { device: { limits: {} }, gpu: { adapterInfo: H100, features: {} }, run: (ds: Dispatch[]) => log.push(`warm ${nameOf(ds)}`) } as unknown as Runtime;
const job: MatmulJob = { family: 'matmul', key: '64x64x64NN', label: 'a GEMM', shape: { M: 64, N: 64, K: 64, transA: false, transB: false } as MatmulJob['shape'], workspaceBytes: 0 };

beforeEach(() => {
  log.length = 0;
  timings = 0;
  clock = () => 1;
});

describe('tuner schedule', () => {
  it('checks and builds a job\'s candidates first, raises the clock on the first, then times them interleaved in rounds', async () => {
    trueMs = { a: 2, b: 1.5, c: 3, bad: 0.1 };
    const out = await tuneJobs(rt, [job], new TuneCache(), { budgetS: 60, rounds: 2 });
    expect(log).toEqual([
      'check a', 'build a', 'settle a 0 ms', 'time a', 'time a', // first phase: the first candidate alone (its time only recorded)
      'check b', 'check c', 'check bad', 'build a', 'build b', 'build c', // second: checks and builds first
      'settle a 500 ms', 'time a', 'time b (first use)', 'time a', 'time c (first use)', 'time a', // round 1 after the clock is up, each bracketed by a
      'time a', 'time c', 'time a', 'time b', 'time a', // round 2, rotated
    ]);
    expect(out.tuned).toEqual([{ key: job.key, label: job.label, pick: 'b', ms: 1.5, untuned: 'a', untunedMs: 2, candidates: 3, rounds: 2, untunedSpread: 1 }]);
    expect(out.rejected).toEqual([expect.objectContaining({ candidate: 'bad', why: 'wrong' })]);
    expect(tunedJobWords(out.tuned[0])).toBe('a GEMM: b 1.5000 ms (untuned a 2.0000 ms, 1.33x; medians of 2 rounds, 3 candidates, untuned spread 1.00x)');
    expect(tunedJobWords({ ...out.tuned[0], pick: 'a', ms: 2 })).toBe('a GEMM: kept the untuned a 2.0000 ms (medians of 2 rounds, 3 candidates, untuned spread 1.00x)');
    expect(tunedJobWords({ ...out.tuned[0], untunedSpread: undefined })).toMatch(/3 candidates\)$/);
    expect(tunedJobWords({ ...out.tuned[0], untunedMs: undefined })).toMatch(/untuned a not timed;/);
  });

  it('a GPU clock that rises through the tune does not hand the pick to the candidates timed last', async () => {
    // a (the untuned pick) is truly fastest; the clock starts at a third of its speed and rises over ~15 timings
    // (timed back to back, c would read fastest: tune/rounds.test.ts).
    trueMs = { a: 0.9, b: 1, c: 1.05, bad: 0.1 };
    clock = (t) => 1 + 2 * Math.exp(-t / 6);
    const out = await tuneJobs(rt, [job], new TuneCache(), { budgetS: 60, rounds: 5, keepMargin: 0 });
    expect(out.tuned[0]).toMatchObject({ pick: 'a', untuned: 'a', rounds: 5 });
    // The other way: b truly 20 % faster than the untuned a, the clock falling (a GPU idling down) as the rounds go.
    log.length = 0;
    timings = 0;
    trueMs = { a: 1.2, b: 1, c: 1.3, bad: 0.1 };
    clock = (t) => 1 + t / 4;
    expect((await tuneJobs(rt, [job], new TuneCache(), { budgetS: 60, rounds: 5 })).tuned[0]).toMatchObject({ pick: 'b', untuned: 'a', untunedMs: expect.any(Number) });
  });

  it('the first candidate (the untuned pick) stays unless another times faster by keepMargin', async () => {
    const tune = async (a: number, b: number) => {
      trueMs = { a, b, c: 9, bad: 0.1 };
      return (await tuneJobs(rt, [job], new TuneCache(), { budgetS: 60, settleMs: 0, rounds: 3 })).tuned[0];
    };
    expect(await tune(2, 1.95)).toMatchObject({ pick: 'a', ms: 2 }); // 2.5 % faster: noise, the untuned pick stays
    expect(await tune(2, 1.8)).toMatchObject({ pick: 'b', ms: 1.8, untunedMs: 2 }); // 10 % faster: it replaces it
    expect(await tune(1.7, 1.8)).toMatchObject({ pick: 'a', ms: 1.7 });
  });

  it('tunes the step\'s jobs before those outside it (the decoder\'s prefill) and an f16 GEMM\'s fp32 fallback', async () => {
    trueMs = { a: 2, b: 1.5, c: 3, bad: 0.1 };
    const prefill: MatmulJob = { ...job, key: '32x64x64NT', label: 'q decoder prefill', offStep: true };
    const fallback: MatmulJob = { ...job, key: '48x64x64NN', label: 'fallback', fallback: true };
    const step: MatmulJob = { ...job, key: '96x64x64NN', label: 'q forward' };
    const out = await tuneJobs(rt, [prefill, fallback, step], new TuneCache(), { budgetS: 60, settleMs: 0, rounds: 2 });
    expect(out.tuned.map((t) => t.key)).toEqual([step.key, prefill.key, fallback.key]);
  });
});
