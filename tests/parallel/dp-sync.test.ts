import { describe, expect, it } from 'vitest';
import { judgeClaimedState, START_LOSS_TOLERANCE, syncVerdict } from '../../src/parallel/dp/sync';
import { heldOutBatches, heldOutSplit } from '../../src/parallel/held-out';
import { TextDataset } from '../../src/engine/train/data/data';
import type { Trainer } from '../../src/engine/train/trainer';
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
    // resumed from a checkpoint) the highest step is offered unvouched: each receiver checks it first.
    expect(syncVerdict(g(m), [st(m, 0, 3, false), st(m, 35, 8, false), st(m, 0, 3, false)], 1, 2, 0)).toEqual({ src: 0, needy: [1], outvoted: ['b'] });
    expect(syncVerdict(g(['a', 'b']), [st(['a', 'b'], 0, 3, false), st(['a', 'b'], 40, 8, false)], 1, 2, 0)).toEqual({ src: 1, needy: [0], outvoted: [], unvouched: true });
    // Three starting members that all differ (two honest ones disagree): unvouched too.
    expect(syncVerdict(g(m), [st(m, 0, 3, false), st(m, 35, 8, false), st(m, 20, 5, false)], 1, 2, 0)).toEqual({ src: 1, needy: [0, 2], outvoted: [], unvouched: true });
  });

  it('an unvouched state is adopted only if its held-out loss is not above the receiver\'s own (1 % tolerance)', () => {
    expect(START_LOSS_TOLERANCE).toBe(0.01);
    expect(judgeClaimedState(3.43, 3.0)).toBeNull(); // a resumed member's better state: a fresh one adopts it
    expect(judgeClaimedState(3.43, 3.43 * 1.009)).toBeNull(); // within the tolerance
    expect(judgeClaimedState(3.43, 4.17)).toMatch(/held-out loss 4\.1700 is above this peer's own 3\.4300 \(\+1\.0 % allowed\)/);
    expect(judgeClaimedState(3.43, Number.NaN)).toMatch(/held-out loss is NaN/);
    expect(judgeClaimedState(3.43, Infinity)).toMatch(/Infinity/);
    expect(judgeClaimedState(Number.NaN, 5)).toBeNull(); // a broken own state takes any finite one
    expect(judgeClaimedState(2, 2.1, 0.1)).toBeNull();
  });

  it('held-out batches: the validation split when it holds a row, else fixed training batches from the shared seed; alike on every member', () => {
    const tokens = Int32Array.from({ length: 400 }, (_, i) => (i * 7) % 13);
    const at = (valFraction: number) => ({ data: TextDataset.fromTokens(tokens, { seed: 3, valFraction }), opts: { seq: 16, batch: 2 } }) as unknown as Trainer;
    expect(heldOutSplit(at(0.1))).toBe('val'); // 40 tokens ≥ T + 1
    const none = at(0.03); // 12 validation tokens: no row of T + 1 = 17
    expect(heldOutSplit(none)).toBe('train');
    const b = heldOutBatches(none, 0, 2, 'train');
    expect(b.map((x) => x.length)).toEqual([34, 34]);
    expect(heldOutBatches(at(0.03), 0, 2, 'train')).toEqual(b); // another member: the same rows
    expect(b[0]).not.toEqual(b[1]);
    expect(() => heldOutBatches(none, 0, 2, 'val')).toThrow(/val split has 12 tokens/);
    expect(() => heldOutBatches(none, 0, 0)).toThrow(/held-out batches must be an integer in \[1, 64\]/);
  });

  it('views that differ: the peers a strict majority of the statuses holds; one status that leaves a member out evicts nobody and is named', () => {
    const four = ['a', 'b', 'c', 'd'];
    const v = syncVerdict(g(four), [st(four, 5, 7), st(four, 5, 7), st(['a', 'b', 'c'], 5, 7), st(four, 5, 7)], 1, 2, 5);
    expect(v).toMatchObject({ agreedView: four, why: expect.stringMatching(/c left out members the majority holds/) });
    // A member most views lack (it left) is dropped.
    expect(syncVerdict(g(four), [st(['a', 'b', 'c'], 5, 7), st(['a', 'b', 'c'], 5, 7), st(['a', 'b', 'c'], 5, 7), st(four, 5, 7)], 1, 2, 5)).toMatchObject({ agreedView: ['a', 'b', 'c'] });
  });
});
