import { describe, expect, it } from 'vitest';
import { DEFAULT_SCREEN, MemberGuard, resolveScreen, screen, type ScreenData } from '../../src/peers/collectives/screen';

/** ScreenData of explicit vectors, summed in double as verified-reduce.ts does. */
function data(vs: number[][]): ScreenData {
  const dot = (a: number[], b: number[]) => a.reduce((s, v, i) => s + v * b[i], 0);
  return {
    finite: vs.map((v) => v.every(Number.isFinite)),
    norm2: vs.map((v) => dot(v, v)),
    dots: (set) => {
      const S = vs[0].map((_, i) => set.reduce((s, r) => s + vs[r][i], 0));
      return { dot: set.map((r) => dot(vs[r], S)), sum2: dot(S, S) };
    },
  };
}
const ids = ['a', 'b', 'c', 'd', 'e'];

describe('screening', () => {
  it('norm bound against the median of the others; cosine drops the worst while a majority remains', () => {
    const h = [[1, 0.2], [0.9, 0.1], [1.1, 0.3], [1, 0]];
    const big = screen(ids, [0, 1, 2, 3, 4], data([...h, [-500, 0]]), DEFAULT_SCREEN);
    expect(big.kept).toEqual([0, 1, 2, 3]);
    expect(big.excluded.map((e) => [e.peer, e.fault])).toEqual([['e', false]]);
    expect(big.excluded[0].why).toMatch(/norm/);
    const flip = screen(ids, [0, 1, 2, 3, 4], data([...h, [-1, -0.1]]), DEFAULT_SCREEN);
    expect(flip.kept).toEqual([0, 1, 2, 3]);
    expect(flip.excluded[0].why).toMatch(/cosine -0\.\d+/);
    // Two members cannot outvote each other by direction: no cosine test below 3.
    expect(screen(ids, [0, 1], data([[1, 0], [-1, 0]]), DEFAULT_SCREEN).kept).toEqual([0, 1]);
    // Three opposed members out of five: at most two are ever dropped by cosine.
    const split = screen(ids, [0, 1, 2, 3, 4], data([[1, 0], [1, 0.1], [-1, 0], [-1, 0.1], [-1, -0.1]]), DEFAULT_SCREEN);
    expect(split.kept.length).toBeGreaterThanOrEqual(3);
    expect(screen(ids, [0, 1], data([[NaN, 0], [1, 0]]), DEFAULT_SCREEN).excluded[0].why).toMatch(/non-finite/);
    expect(screen(ids, [0, 1, 2], data([[1, 0], [-1, 0], [0.5, 0]]), { ...DEFAULT_SCREEN, minCosine: null }).kept).toEqual([0, 1, 2]);
  });

  it('options are checked; strikes count consecutive failures, faults remove at once; HELLO restarts are rate-limited', () => {
    expect(() => resolveScreen({ normK: 0.5 })).toThrow(/normK/);
    expect(() => resolveScreen({ minCosine: 2 })).toThrow(/minCosine/);
    expect(() => resolveScreen({ strikes: 0 })).toThrow(/strikes/);
    let now = 0;
    const g = new MemberGuard(2, 1000, () => now);
    const e = (peer: string, fault = false) => ({ peer, rank: 0, why: 'x', fault });
    expect(g.record(['a', 'b'], [e('b')])).toEqual([]);
    expect(g.record(['a', 'b'], [])).toEqual([]); // a clean step resets b's count
    expect(g.record(['a', 'b'], [e('b')])).toEqual([]);
    expect(g.record(['a', 'b'], [e('b')]).map((x) => x.peer)).toEqual(['b']);
    expect(g.bannedWhy('b')).toMatch(/screened out 2 steps in a row/);
    expect(g.record(['a', 'c'], [e('c', true)]).map((x) => x.peer)).toEqual(['c']);
    expect(g.bannedWhy('a')).toBeNull();
    expect(g.allowRestart('a')).toBe(true);
    now = 999;
    expect(g.allowRestart('a')).toBe(false);
    now = 1000;
    expect(g.allowRestart('a')).toBe(true);
  });
});
