// The tuner's rounds (engine/tune/measure.ts timeInRounds, roundScores) with a stand-in timer: the
// order the candidates are timed in, the drop of a clear loser after the first round, the scores,
// and why interleaving: a clock that drifts through the timings misranks back-to-back timings (all
// of one candidate's samples, then the next's) but not the rounds.
import { describe, expect, it } from 'vitest';
import { median } from '../../../src/engine/gpu/timer';
import { roundScores, timeInRounds } from '../../../src/engine/tune/measure';

/** A stand-in timer: candidate i's true ms times the clock's factor at this timing (counted from 0); logs the order. */
function timer(trueMs: number[], clock: (t: number) => number) {
  const order: number[] = [];
  return { order, time: async (i: number) => (order.push(i), trueMs[i] * clock(order.length - 1)) };
}

/** The lowest-scoring candidate of the rounds. */
const pickOf = (samples: number[][]) => {
  const s = roundScores(samples).map((x) => x.score);
  return s.indexOf(Math.min(...s));
};

describe('tuner rounds', () => {
  it('times every candidate once a round, the order rotated by one each round, after that round\'s warm-up', async () => {
    const log: string[] = [];
    const { samples, rounds } = await timeInRounds(3, async (i) => (log.push('ABC'[i]), i + 1), { rounds: 4, warm: async (r) => void log.push(`warm${r}`) });
    expect(log.join(' ')).toBe('warm0 A B C warm1 B C A warm2 C A B warm3 A B C');
    expect(rounds).toBe(4);
    expect(samples).toEqual([[1, 1, 1, 1], [2, 2, 2, 2], [3, 3, 3, 3]]);
  });

  it('a candidate over dropMargin × the first round\'s fastest times no more rounds; the reference always stays', async () => {
    const t = timer([3, 1, 1.4], () => 1);
    const { samples } = await timeInRounds(3, t.time, { rounds: 3, dropMargin: 1.5 });
    expect(samples).toEqual([[3, 3, 3], [1, 1, 1], [1.4, 1.4, 1.4]]);
    const u = timer([1, 1.6, 1.4], () => 1);
    const cut = await timeInRounds(3, u.time, { rounds: 3, dropMargin: 1.5 });
    expect(cut.samples).toEqual([[1, 1, 1], [1.6, NaN, NaN], [1.4, 1.4, 1.4]]);
    expect(u.order).toEqual([0, 1, 2, 2, 0, 2, 0]);
  });

  it('stops between rounds once the signal is aborted', async () => {
    const abort = new AbortController();
    const { rounds, samples } = await timeInRounds(2, async () => 1, { rounds: 5, signal: abort.signal, warm: async (r) => void (r === 2 && abort.abort()) });
    // Round 2 started before the abort was seen: the signal is read between rounds.
    expect(rounds).toBe(3);
    expect(samples[0]).toHaveLength(3);
    expect((await timeInRounds(2, async () => 1, { rounds: 5, signal: abort.signal })).rounds).toBe(0);
  });

  it('scores: the median over rounds of each candidate\'s time over the reference\'s in the same round, on the reference\'s scale', () => {
    // The clock halves between rounds: raw medians tie b with a; within each round b is 20 % faster.
    const r = roundScores([[2, 1, 4], [1.6, 0.8, 3.2], [5, NaN, NaN]]);
    expect(r[0]).toEqual({ medianMs: 2, score: 2 });
    expect(r[1].medianMs).toBeCloseTo(1.6);
    expect(r[1].score).toBeCloseTo(1.6);
    expect(r[2]).toEqual({ medianMs: 5, score: 5 }); // one round, as timed
  });

  it('a drifting clock: back-to-back timings misrank the candidates, the rounds do not', async () => {
    // [clock (a factor on the timing's ms, by the count of timings so far), each candidate's true ms]
    const cases: [string, (t: number) => number, number[]][] = [
      ['rising from a third of its speed, the reference (the untuned pick) truly fastest', (t) => 1 + 2 * Math.exp(-t / 6), [0.9, 1, 1.05]],
      ['falling, the last truly fastest', (t) => 1 + t / 4, [1.2, 1.1, 1]],
      ['rising then falling (the middle one meets the best clock), the last truly fastest', (t) => 1 + Math.abs(t - 8) / 16, [1, 1.05, 0.9]],
    ];
    for (const [what, clock, trueMs] of cases) {
      const fastest = trueMs.indexOf(Math.min(...trueMs));
      // Back to back: five samples of each candidate in turn, their medians compared (the tuner before the rounds).
      const b2b = timer(trueMs, clock);
      const medians: number[] = [];
      for (let i = 0; i < 3; i++) {
        const xs: number[] = [];
        for (let k = 0; k < 5; k++) xs.push(await b2b.time(i));
        medians.push(median(xs));
      }
      expect(medians.indexOf(Math.min(...medians)), what).not.toBe(fastest);
      // The same timer in five rounds of one sample each.
      expect(pickOf((await timeInRounds(3, timer(trueMs, clock).time, { rounds: 5 })).samples), what).toBe(fastest);
    }
  });
});
