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
  it('a contribution is left out when a strict majority of the others object to it (norm far above theirs, or pointing away from theirs)', () => {
    const h = [[1, 0.2], [0.9, 0.1], [1.1, 0.3], [1, 0]];
    const big = screen(ids, [0, 1, 2, 3, 4], data([...h, [-500, 0]]), DEFAULT_SCREEN);
    expect(big.kept).toEqual([0, 1, 2, 3]);
    expect(big.excluded.map((e) => [e.peer, e.fault, e.strike ?? true])).toEqual([['e', false, true]]);
    expect(big.excluded[0].why).toMatch(/4 of the other 4 object: norm/);
    const flip = screen(ids, [0, 1, 2, 3, 4], data([...h, [-1, -0.1]]), DEFAULT_SCREEN);
    expect(flip.kept).toEqual([0, 1, 2, 3]);
    expect(flip.excluded[0].why).toMatch(/cosine -0\.\d+/);
    expect(screen(ids, [0, 1], data([[NaN, 0], [1, 0]]), DEFAULT_SCREEN).excluded[0].why).toMatch(/non-finite/);
    expect(screen(ids, [0, 1, 2], data([[1, 0], [-1, 0], [0.5, 0]]), { ...DEFAULT_SCREEN, minCosine: null }).kept).toEqual([0, 1, 2]);
  });

  it('one insider cannot frame an honest member: its figures only count once against each', () => {
    const a = [1, 0.2];
    const b = [0.9, -0.1];
    // Aimed at both (−2 × their sum: the old screen's "cosine with the others' mean" failed both honest members).
    const aimed = screen(ids, [0, 1, 2], data([a, b, [-3.8, -0.2]]), DEFAULT_SCREEN);
    expect(aimed.kept).toEqual([0, 1]);
    expect(aimed.excluded.map((e) => e.peer)).toEqual(['c']);
    // Tiny (it objects to both by norm) or zero: one objection each is no majority; nobody is left out.
    expect(screen(ids, [0, 1, 2], data([a, b, [1e-9, 0]]), DEFAULT_SCREEN).kept).toEqual([0, 1, 2]);
    expect(screen(ids, [0, 1, 2], data([a, b, [0, 0]]), DEFAULT_SCREEN).kept).toEqual([0, 1, 2]);
    // A copy of one honest member's, opposed to the other's direction: still only one objection against b.
    expect(screen(ids, [0, 1, 2, 3], data([a, b, [1, 0.3], [-1, 0.1]]), DEFAULT_SCREEN).excluded.map((e) => e.peer)).toEqual(['d']);
  });

  it('what cannot be decided is not held against anyone: two members, or a split with no majority left', () => {
    // Two members: directions are not judged; the far larger is left out of the step without a strike.
    expect(screen(ids, [0, 1], data([[1, 0], [-1, 0]]), DEFAULT_SCREEN).kept).toEqual([0, 1]);
    const two = screen(ids, [0, 1], data([[1, 0], [-100, 0]]), DEFAULT_SCREEN);
    expect(two.kept).toEqual([0]);
    expect(two.excluded).toEqual([expect.objectContaining({ peer: 'b', strike: false })]);
    // Two against two (two colluding insiders among four): no majority remains; the smallest is kept, no strikes.
    const split = screen(ids, [0, 1, 2, 3], data([[1, 0], [1, 0.1], [-1, 0], [-1.1, 0.1]]), DEFAULT_SCREEN);
    expect(split.kept).toEqual([0]);
    expect(split.excluded.every((e) => e.strike === false)).toBe(true);
    // Three opposed to two: the two are outvoted (a strict majority remains).
    const five = screen(ids, [0, 1, 2, 3, 4], data([[1, 0], [1, 0.1], [-1, 0], [-1, 0.1], [-1, -0.1]]), DEFAULT_SCREEN);
    expect(five.kept).toEqual([2, 3, 4]);
    const g = new MemberGuard(1, 1000);
    expect(g.record(ids, two.excluded)).toEqual([]);
    expect(g.record(ids, split.excluded)).toEqual([]);
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
