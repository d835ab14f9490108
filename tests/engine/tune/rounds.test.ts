// The tuner's rounds (engine/tune/measure.ts timeInRounds, roundScores; tuner.ts keepRanking) with a
// stand-in timer: the order the candidates are timed in (each bracketed by the reference, the job's
// untuned pick), the pipelining of rounds, the drop of a clear loser, the scores, and why: under a
// clock that moves from timing to timing, the rotated rounds the tuner had (s29c1) picked a candidate
// slower than the untuned one, the bracketed rounds with the keep rule do not.
import { describe, expect, it } from 'vitest';
import { median } from '../../../src/engine/gpu/timer';
import { bracketedOrder, roundScores, timeInRounds } from '../../../src/engine/tune/measure';
import { keepRanking } from '../../../src/engine/tune/tuner';

/** A stand-in GPU: each item of a round is timed as it is asked for (the GPU runs submits in order): its true ms times the clock at that timing. */
function gpu(trueMs: number[], clock: (t: number) => number) {
  const order: number[] = [];
  return {
    order,
    timeRound: async (o: number[]) => o.map((i) => (order.push(i), trueMs[i] * clock(order.length - 1))),
  };
}

/** A clock (a factor on ms by the count of timings) that walks by up to ×1.5 a timing between 1 and 5.7 (1,980 vs 345 MHz), from a seed. */
function walkingClock(seed: number): (t: number) => number {
  const steps = [0.7, 1, 1, 1.3, 1.5];
  const f: number[] = [];
  let s = seed >>> 0;
  let v = 1;
  return (t) => {
    while (f.length <= t) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      v = Math.min(5.7, Math.max(1, v * steps[(s >>> 16) % steps.length]));
      f.push(v);
    }
    return f[t];
  };
}

/**
 * The tuner's rounds before the bracketing (s29c1): each round every candidate once, the order
 * rotated by one (A B C, B C A, …), a candidate's score the median over rounds of its time over the
 * reference's one time in that round.
 */
function rotatedRounds(trueMs: number[], clock: (t: number) => number, rounds: number) {
  const n = trueMs.length;
  const ms = trueMs.map(() => [] as number[]);
  let t = 0;
  for (let r = 0; r < rounds; r++) for (let j = 0; j < n; j++) ms[(r + j) % n].push(trueMs[(r + j) % n] * clock(t++));
  return { ratio: ms.map((s) => median(s.map((x, r) => x / ms[0][r]))), medianMs: ms.map(median) };
}

/** The tuner's pick (by index) from the bracketed rounds' scores and medians, the reference (0) kept unless another is 5 % faster. */
function pickOf(r: Awaited<ReturnType<typeof timeInRounds>>): number {
  const s = roundScores(r);
  const ranked = keepRanking(new Map(s.score.map((x, i) => [String(i), x])), new Map(s.medianMs.map((x, i) => [String(i), x])), '0', 0.05);
  return Number([...ranked].sort((a, b) => a[1] - b[1])[0][0]);
}

/** 12 candidates as the H100's gate dW job had: the reference 1 ms, candidate 4 10 % slower, the others 30 % slower. */
const twelve = Array.from({ length: 12 }, (_, i) => (i === 0 ? 1 : i === 4 ? 1.1 : 1.3));

describe('tuner rounds', () => {
  it('brackets every candidate by the reference, the others rotated by one a round', () => {
    expect(bracketedOrder([1, 2, 3], 0)).toEqual([0, 1, 0, 2, 0, 3, 0]);
    expect(bracketedOrder([1, 2, 3], 1)).toEqual([0, 2, 0, 3, 0, 1, 0]);
    expect(bracketedOrder([1, 3], 3)).toEqual([0, 3, 0, 1, 0]);
    expect(bracketedOrder([], 2)).toEqual([0]);
  });

  it('times the rounds after one warm-up; ratios to the two reference timings around each candidate', async () => {
    const log: string[] = [];
    const ms = [[2, 3, 4, 1, 2], [2, 1, 2, 6, 4]];
    let r = 0;
    const out = await timeInRounds(3, async (order) => (log.push(order.join('')), ms[r++]), { rounds: 2, warm: async () => void log.push('warm') });
    expect(log).toEqual(['warm', '01020', '02010']);
    expect(out.rounds).toBe(2);
    expect(out.refMs).toEqual([2, 4, 2, 2, 2, 4]);
    expect(out.samples).toEqual([[8 / 3, 8 / 3], [3, 6], [1, 1]]);
    expect(out.ratios).toEqual([[1, 1], [1, 2], [1 / 3, 0.5]]);
    const s = roundScores(out);
    expect(s.medianMs).toEqual([8 / 3, 4.5, 1]);
    expect(s.score[0]).toBeCloseTo(8 / 3);
    expect(s.score[1]).toBeCloseTo(1.5 * 8 / 3);
    expect(s.score[2]).toBeCloseTo((5 / 12) * 8 / 3);
    expect(s.refSpread).toBe(2);
  });

  it('pipelined: the next round is asked for before this one is read; without, after', async () => {
    for (const pipelined of [true, false]) {
      const log: string[] = [];
      let k = 0;
      await timeInRounds(2, (order) => {
        const id = k++;
        log.push(`ask ${id}`);
        return new Promise((res) => setTimeout(() => (log.push(`read ${id}`), res(order.map(() => 1))), 1));
      }, { rounds: 3, pipelined });
      expect(log).toEqual(pipelined ? ['ask 0', 'ask 1', 'read 0', 'ask 2', 'read 1', 'read 2'] : ['ask 0', 'read 0', 'ask 1', 'read 1', 'ask 2', 'read 2']);
    }
  });

  it('a candidate over dropMargin × the best of the first round leaves the rounds asked for after it is read', async () => {
    const t = gpu([1, 1.6, 1.4], () => 1);
    const { samples } = await timeInRounds(3, t.timeRound, { rounds: 3, dropMargin: 1.5 });
    expect(samples).toEqual([[1, 1, 1], [1.6, NaN, NaN], [1.4, 1.4, 1.4]]);
    expect(t.order).toEqual([0, 1, 0, 2, 0, 0, 2, 0, 0, 2, 0]);
    // Pipelined, round 1 is already queued when round 0 is read.
    const p = gpu([1, 1.6, 1.4], () => 1);
    expect((await timeInRounds(3, p.timeRound, { rounds: 3, dropMargin: 1.5, pipelined: true })).samples[1]).toEqual([1.6, 1.6, NaN]);
  });

  it('stops asking for rounds once the signal is aborted', async () => {
    const abort = new AbortController();
    let k = 0;
    const out = await timeInRounds(2, async (order) => (++k === 2 && abort.abort(), order.map(() => 1)), { rounds: 5, signal: abort.signal });
    expect(out.rounds).toBe(2);
    expect(out.samples[0]).toHaveLength(2);
    expect((await timeInRounds(2, async (o) => o.map(() => 1), { rounds: 5, signal: abort.signal })).rounds).toBe(0);
  });

  it('s29c1\'s mis-pick: under a walking clock the rotated rounds pick a candidate slower than the untuned by its own median; the bracketed rounds keep the untuned', async () => {
    const old = rotatedRounds(twelve, walkingClock(273), 5);
    // Candidate 4 (truly 10 % slower) scores 23 % faster while its median is 43 % over the reference's: it was picked.
    expect(old.ratio[4]).toBeLessThan(0.95);
    expect(Math.min(...old.ratio.slice(1))).toBe(old.ratio[4]);
    expect(old.medianMs[4]).toBeGreaterThan(1.4 * old.medianMs[0]);
    for (const seed of [273, 245]) {
      const r = await timeInRounds(12, gpu(twelve, walkingClock(seed)).timeRound, { rounds: 5, pipelined: true });
      expect(pickOf(r), `seed ${seed}`).toBe(0);
    }
  });

  it('a clock that falls through each round (the GPU idling between timings, raised by each round\'s warm-up): rotated rounds misrank, bracketed ones do not', async () => {
    const rotatedClock = (t: number) => 1 + 0.1 * (t % 12);
    const old = rotatedRounds(twelve, rotatedClock, 5);
    expect(old.ratio[4]).toBeLessThan(0.7); // 10 % slower, scored 30 % faster: the reference sat late in rounds 1-4
    const r = await timeInRounds(12, gpu(twelve, (t) => 1 + 0.1 * (t % 23)).timeRound, { rounds: 5 });
    const s = roundScores(r);
    expect(s.score[4] / s.score[0]).toBeGreaterThan(1.05);
    expect(pickOf(r)).toBe(0);
    // A truly 20 % faster candidate is still found.
    const faster = twelve.map((x, i) => (i === 7 ? 0.8 : x));
    expect(pickOf(await timeInRounds(12, gpu(faster, (t) => 1 + 0.1 * (t % 23)).timeRound, { rounds: 5 }))).toBe(7);
  });

  it('a drifting clock: back-to-back timings misrank the candidates, the bracketed rounds do not', async () => {
    // [clock (a factor on the timing's ms, by the count of timings so far), each candidate's true ms]
    const cases: [string, (t: number) => number, number[]][] = [
      ['rising from a third of its speed, the reference (the untuned pick) truly fastest', (t) => 1 + 2 * Math.exp(-t / 6), [0.9, 1, 1.05]],
      ['falling, the last truly fastest', (t) => 1 + t / 4, [1.2, 1.1, 1]],
      ['rising then falling (the middle one meets the best clock), the last truly fastest', (t) => 1 + Math.abs(t - 8) / 16, [1, 1.05, 0.9]],
    ];
    for (const [what, clock, trueMs] of cases) {
      const fastest = trueMs.indexOf(Math.min(...trueMs));
      // Back to back: five samples of each candidate in turn, their medians compared.
      const b2b = gpu(trueMs, clock);
      const medians: number[] = [];
      for (let i = 0; i < 3; i++) medians.push(median(await b2b.timeRound([i, i, i, i, i])));
      expect(medians.indexOf(Math.min(...medians)), what).not.toBe(fastest);
      const s = roundScores(await timeInRounds(3, gpu(trueMs, clock).timeRound, { rounds: 5 }));
      expect(s.score.indexOf(Math.min(...s.score)), what).toBe(fastest);
    }
  });

  it('keepRanking: the untuned pick stays unless another scores faster by the margin and is faster by its own median', () => {
    const rank = (scores: number[], medians: number[]) => {
      const r = keepRanking(new Map(scores.map((x, i) => ['abc'[i], x])), new Map(medians.map((x, i) => ['abc'[i], x])), 'a', 0.05);
      return [...r].sort((x, y) => x[1] - y[1]).map(([n]) => n).join('');
    };
    expect(rank([1, 0.9, 1.2], [1, 0.9, 1.2])).toBe('bac');
    expect(rank([1, 0.97, 1.2], [1, 0.97, 1.2])).toBe('abc'); // 3 % faster: noise
    expect(rank([1, 0.8, 1.2], [1, 1.23, 1.2])).toBe('abc'); // s29c1: scored 20 % faster, its median 23 % slower
    expect(rank([1, 0.8, 0.85], [1, 1.1, 0.9])).toBe('cab'); // only c is faster by its median too
    expect(rank([1, 0.8, 0.7], [1, 1.1, 1.05])).toBe('acb'); // those set behind the untuned keep their order
  });
});
