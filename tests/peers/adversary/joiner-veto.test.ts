/**
 * An insider vetoing a late joiner (issue 38: it left the joiner out of its end-of-step report, and
 * the joiner was never welcomed in 120 s). Admission is by a strict majority of the reports, and the
 * joiner enters on identical WELCOMEs from a majority of the listed members: the insider can
 * neither keep it out by omission or by withholding its WELCOME, nor pull it into a forged group.
 */
import { describe, expect, it } from 'vitest';
import { admitByMajority, JoinRequests, WelcomeVotes } from '../../../src/parallel/dp/joins';
import { MemberGuard } from '../../../src/peers/collectives/screen';

const GROUP = ['a', 'b', 'c', 'i'];

describe('an insider against a late joiner', () => {
  it('leaving the joiner out of its report: admitted at that step all the same, the insider named', () => {
    const lists = [['j'], ['j'], ['j'], []];
    expect(admitByMajority(GROUP, lists)).toEqual({ admitted: ['j'], omitted: ['i'] });
    // Three members: one omission is outvoted too.
    expect(admitByMajority(['a', 'b', 'i'], [['j'], ['j'], []])).toEqual({ admitted: ['j'], omitted: ['i'] });
    // A joiner only the insider lists (e.g. its own Sybil) is not admitted.
    expect(admitByMajority(GROUP, [[], [], [], ['s']]).admitted).toEqual([]);
    // Two members: a joiner needs both (one word against the other decides nothing).
    expect(admitByMajority(['a', 'i'], [['j'], []]).admitted).toEqual([]);
  });

  it('withholding its WELCOME, or sending a forged one: the joiner enters the majority\'s group at once, never the forged one', () => {
    const members = [...GROUP, 'j'];
    const v = new WelcomeVotes();
    const none = new Set<string>();
    // The forged welcome comes first: another epoch, a list without c.
    expect(v.add('i', 'j', 9, ['a', 'b', 'i', 'j'], none)).toBeNull();
    expect(v.add('a', 'j', 3, members, none)).toBeNull();
    expect(v.add('b', 'j', 3, members, none)).toBeNull();
    expect(v.add('c', 'j', 3, members, none)).toEqual({ epoch: 3, members });
    // Two joiners at once (each heard the other's HELLO): the other joiner is not a voter.
    const w = new WelcomeVotes();
    const both = [...GROUP, 'j', 'k'].sort();
    expect(w.add('a', 'j', 3, both, new Set(['k']))).toBeNull();
    expect(w.add('b', 'j', 3, both, new Set(['k']))).toBeNull();
    expect(w.add('c', 'j', 3, both, new Set(['k']))).toEqual({ epoch: 3, members: both });
  });

  it('a member dropped honestly (its link fell, or silent) asks again and is admitted at the next step, twice in a minute too; only a removed member stays out', () => {
    const guard = new MemberGuard(3, 60_000, () => 0);
    const j = new JoinRequests();
    // Dropped: the transport reported it gone; the regrouped members no longer list it.
    j.gone('c');
    expect(j.hello('c', false, () => guard.allowRestart('c'))).toBe('request');
    expect(admitByMajority(['a', 'b'], [j.joiners(['a', 'b'], ['a', 'b', 'c']), ['c']]).admitted).toEqual(['c']);
    j.admitted(['c']);
    j.synced();
    // Dropped again at once: its HELLO while still listed is a restart at most once a minute, but
    // once the group regrouped without it, a plain request again; no ban.
    expect(j.hello('c', true, () => guard.allowRestart('c'))).toBe('restart');
    expect(j.hello('c', true, () => guard.allowRestart('c'))).toBe('too-soon');
    j.gone('c');
    expect(j.hello('c', false, () => guard.allowRestart('c'))).toBe('request');
    expect(guard.bannedWhy('c')).toBeNull();
    guard.ban('c', 'screened out 3 steps in a row');
    expect(guard.bannedWhy('c')).toMatch(/screened/); // the member group refuses its HELLO for the run
  });
});
