import { describe, expect, it } from 'vitest';
import { JoinRequests } from '../../src/parallel/dp/joins';

describe('JoinRequests', () => {
  it('a hello is a request until admitted; a crossed hello after admission is ignored until the sync', () => {
    const j = new JoinRequests();
    expect(j.hello('b', false, () => true)).toBe('request');
    expect(j.joiners(['a'], ['a', 'b'])).toEqual(['b']);
    expect(j.joiners(['a'], ['a'])).toEqual([]); // not connected
    j.admitted(['b']);
    expect(j.joiners(['a'], ['a', 'b'])).toEqual([]);
    expect(j.hello('b', true, () => true)).toBe('ignore');
    j.synced();
    // After the sync a member's hello is a restart again.
    expect(j.hello('b', true, () => true)).toBe('restart');
    expect(j.isExcluded('b')).toBe(true);
    expect(j.joiners(['a'], ['a', 'b'])).toEqual(['b']);
  });

  it('a restart too soon is refused and changes nothing; bye and gone drop the request', () => {
    const j = new JoinRequests();
    expect(j.hello('c', true, () => false)).toBe('too-soon');
    expect(j.isExcluded('c')).toBe(false);
    expect(j.joiners([], ['c'])).toEqual([]);
    j.hello('c', false, () => true);
    j.bye('c', true);
    expect(j.joiners([], ['c'])).toEqual([]);
    expect(j.isExcluded('c')).toBe(true);
    j.welcomed();
    expect(j.isExcluded('c')).toBe(false);
    j.hello('d', false, () => true);
    j.admitted(['d']);
    j.gone('d');
    expect(j.hello('d', true, () => true)).toBe('restart'); // no longer "admitted since the sync"
  });
});
