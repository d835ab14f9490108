import { describe, expect, it } from 'vitest';
import { syncVerdict } from '../../src/parallel/dp/sync';
import type { GroupStatus } from '../../src/parallel/dp/wire';
import type { PeerGroup } from '../../src/peers/collectives/group';

describe('state adoption by majority (syncVerdict)', () => {
  const g = (members: string[]) => ({ members, size: members.length }) as unknown as PeerGroup;
  const st = (members: string[], step: number, weightsHash: number, established = true): GroupStatus => ({ fingerprint: 1, epoch: 2, members, step, weightsHash, established, stateDigest: new Uint8Array(32).fill(weightsHash) });
  const m = ['a', 'b', 'c'];

  it('a forged state one step ahead is outvoted; the digest, not the weights hash alone, is what is vouched for; a joiner gets the majority\'s; no majority adopts nothing', () => {
    expect(syncVerdict(g(m), [st(m, 5, 7), st(m, 5, 7), st(m, 6, 9)], 1, 2, 5)).toEqual({ src: 0, needy: [2], outvoted: ['c'] });
    expect(syncVerdict(g(m), [st(m, 6, 9), st(m, 5, 7), st(m, 5, 7)], 1, 2, 5)).toEqual({ src: 1, needy: [0], outvoted: ['a'] });
    expect(syncVerdict(g(m), [st(m, 5, 7), st(m, 5, 7), st(m, 0, 3, false)], 1, 2, 5)).toEqual({ src: 0, needy: [2], outvoted: [] });
    expect(() => syncVerdict(g(['a', 'b']), [st(['a', 'b'], 5, 7), st(['a', 'b'], 6, 9)], 1, 2, 5)).toThrow(/no majority .* nothing adopted/);
    const bogusMoments = { ...st(m, 5, 7), stateDigest: new Uint8Array(32).fill(99) }; // same weights, other Adam state
    expect(syncVerdict(g(m), [st(m, 5, 7), bogusMoments, st(m, 5, 7)], 1, 2, 5)).toEqual({ src: 0, needy: [1], outvoted: ['b'] });
    // Starting together, nothing established: the state a strict majority holds, never the furthest claim
    // (issue 38: an insider claiming step 35 set the start); without a majority (two members, one
    // resumed from a checkpoint) the highest step.
    expect(syncVerdict(g(m), [st(m, 0, 3, false), st(m, 35, 8, false), st(m, 0, 3, false)], 1, 2, 0)).toEqual({ src: 0, needy: [1], outvoted: ['b'] });
    expect(syncVerdict(g(['a', 'b']), [st(['a', 'b'], 0, 3, false), st(['a', 'b'], 40, 8, false)], 1, 2, 0)).toEqual({ src: 1, needy: [0], outvoted: [] });
  });

  it('views that differ: the peers a strict majority of the statuses holds; one status that leaves a member out evicts nobody and is named', () => {
    const four = ['a', 'b', 'c', 'd'];
    const v = syncVerdict(g(four), [st(four, 5, 7), st(four, 5, 7), st(['a', 'b', 'c'], 5, 7), st(four, 5, 7)], 1, 2, 5);
    expect(v).toMatchObject({ agreedView: four, why: expect.stringMatching(/c left out members the majority holds/) });
    // A member most views lack (it left) is dropped.
    expect(syncVerdict(g(four), [st(['a', 'b', 'c'], 5, 7), st(['a', 'b', 'c'], 5, 7), st(['a', 'b', 'c'], 5, 7), st(four, 5, 7)], 1, 2, 5)).toMatchObject({ agreedView: ['a', 'b', 'c'] });
  });
});
