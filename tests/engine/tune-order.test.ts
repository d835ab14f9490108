// The tuner's schedule (tune/tuner.ts): a job's checks all come before its timings, which run back to
// back after the first candidate's time holds still, and the back-to-back times (not the first
// round's, met at another GPU clock) decide the pick. The GEMM job's preparation is replaced by
// candidates that log what is asked of them: the schedule is the unit here, not the kernels.
import { describe, expect, it, vi } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import type { Candidate, PreparedJob } from '../../src/engine/tune/candidate';
import type { MatmulJob } from '../../src/engine/tune/jobs';

const log: string[] = [];
/** ms each candidate reports per call, in order (the last repeats). */
const plan: Record<string, number[]> = {};

vi.mock('../../src/engine/tune/gemm', async (orig) => ({
  ...(await orig<object>()),
  prepareMatmul: (_rt: Runtime, job: MatmulJob): PreparedJob => ({
    job, rejected: [],
    candidates: ['a', 'b', 'c', 'bad'].map((name): Candidate => ({
      name,
      check: async () => (log.push(`check ${name}`), name === 'bad' ? 'wrong' : null),
      time: async () => {
        log.push(`time ${name}`);
        const q = plan[name];
        return q.length > 1 ? q.shift()! : q[0];
      },
    })),
    picks: (times) => [...times].sort((x, y) => x[1] - y[1]).map(([n]) => n),
    free: () => {},
  }),
}));

const { tuneJobs } = await import('../../src/engine/tune/tuner');
const { TuneCache } = await import('../../src/engine/tune');

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100' };
const rt = { device: { limits: {} }, gpu: { adapterInfo: H100, features: {} } } as unknown as Runtime;
const job: MatmulJob = { family: 'matmul', key: '64x64x64NN', label: 'a GEMM', shape: { M: 64, N: 64, K: 64, transA: false, transB: false } as MatmulJob['shape'], workspaceBytes: 0 };

describe('tuner schedule', () => {
  it('checks a job\'s candidates first, settles the clock on the first, then times all back to back; those times decide', async () => {
    // 'a' met a low clock in the first round (9 ms) and settles 4 → 2.1 → 2.05; 'b' is truly fastest.
    Object.assign(plan, { a: [9, 4, 2.1, 2.05, 2.0], b: [1.5], c: [3], bad: [0.1] });
    const cache = new TuneCache();
    const out = await tuneJobs(rt, [job], cache, { budgetS: 60 });
    expect(log).toEqual([
      'check a', 'time a', // first round: the first candidate alone
      'check b', 'check c', 'check bad', // second round: checks first
      'time a', 'time a', 'time a', // settling: until two times agree within 3 %
      'time a', 'time b', 'time c', // back to back
    ]);
    expect(out.tuned).toEqual([expect.objectContaining({ pick: 'b', ms: 1.5, candidates: 3 })]);
    expect(out.rejected).toEqual([expect.objectContaining({ candidate: 'bad', why: 'wrong' })]);
  });

  it('the first candidate (the untuned pick) stays unless another times faster by keepMargin', async () => {
    const tune = async (a: number, b: number) => {
      log.length = 0;
      Object.assign(plan, { a: [a], b: [b], c: [9], bad: [0.1] });
      return (await tuneJobs(rt, [job], new TuneCache(), { budgetS: 60, settleMs: 0 })).tuned[0];
    };
    expect(await tune(2, 1.95)).toMatchObject({ pick: 'a', ms: 2 }); // 2.5 % faster: noise, the untuned pick stays
    expect(await tune(2, 1.8)).toMatchObject({ pick: 'b', ms: 1.8 }); // 10 % faster: it replaces it
    expect(await tune(1.7, 1.8)).toMatchObject({ pick: 'a', ms: 1.7 });
  });
});
