/**
 * Data parallelism with loss scaling (issue 35): the members' state digest covers the loss scaler's
 * state, so two members whose scalers diverged do not count as agreeing, and the state a late joiner
 * receives carries the scaler (checked, under the message's checksum) into restoreTrainingState.
 */
import { describe, expect, it } from 'vitest';
import type { FlatTrainingState, LossScaleCheckpoint, Trainer } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { handOver, stateDigest, syncVerdict } from '../../src/parallel/dp/sync';
import { decodeState, encodeState, type GroupStatus, LOSS_SCALE_BYTES, stateBytes, weightsHash } from '../../src/parallel/dp/wire';
import { crc32 } from '../../src/peers/collectives/crc32';
import { digestOfParts, sameBytes } from '../../src/peers/collectives/digest';
import type { PeerGroup } from '../../src/peers/collectives/group';

const LS: LossScaleCheckpoint = { scale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000, growthTracker: 17, skipped: 3 };

function state(n: number, seed: number, lossScale?: LossScaleCheckpoint): FlatTrainingState {
  const rng = new Rng(seed);
  const v = rng.normalArray(n).map(Math.abs);
  return { weights: rng.normalArray(n), m: rng.normalArray(n), v, step: 9, ...(lossScale ? { lossScale } : {}) };
}

/** Re-seals a tampered state message's checksum (everything after the 20-byte head), as a lying sender would. */
function reseal(bytes: Uint8Array): Uint8Array {
  new DataView(bytes.buffer, bytes.byteOffset).setUint32(16, crc32(bytes.subarray(20)), true);
  return bytes;
}

describe('data parallelism and the loss scaler', () => {
  it('the state digest covers the scaler: a diverged scale, tracker or skip count changes it; runs without a scaler digest as before', async () => {
    const s = state(64, 1, LS);
    const d = await stateDigest(s);
    expect(sameBytes(await stateDigest(state(64, 1, { ...LS })), d)).toBe(true);
    for (const diverged of [{ scale: 2 ** 15 }, { growthTracker: 18 }, { skipped: 4 }]) {
      expect(sameBytes(await stateDigest({ ...s, lossScale: { ...LS, ...diverged } }), d), JSON.stringify(diverged)).toBe(false);
    }
    // Without loss scaling the digest is the one members vouched for before the scaler existed.
    const plain = state(64, 1);
    const f = (x: Float32Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
    const step = new Uint8Array(4);
    new DataView(step.buffer).setUint32(0, plain.step, true);
    expect(sameBytes(await stateDigest(plain), await digestOfParts([step, f(plain.weights), f(plain.m), f(plain.v)]))).toBe(true);
    expect(sameBytes(await stateDigest(plain), d)).toBe(false);
  });

  it('a member whose scaler diverged (same weights, same step) is outvoted and resynced', async () => {
    const m = ['a', 'b', 'c'];
    const g = { members: m, size: 3 } as unknown as PeerGroup;
    const good = state(64, 2, LS);
    const status = async (s: FlatTrainingState): Promise<GroupStatus> => ({
      fingerprint: 1, epoch: 2, members: m, step: s.step, weightsHash: weightsHash(s.weights), established: true, stateDigest: await stateDigest(s),
    });
    const st = [await status(good), await status({ ...good, lossScale: { ...LS, scale: 2 ** 14 } }), await status(good)];
    expect(st[1].weightsHash).toBe(st[0].weightsHash);
    expect(syncVerdict(g, st, 1, 2, 9)).toEqual({ src: 0, needy: [1], outvoted: ['b'] });
  });

  it('the state message carries the scaler under its checksum; its presence must match the plan; an invalid one is refused', () => {
    const n = 100;
    const s = state(n, 3, LS);
    const want = { n, step: 9, weightsHash: weightsHash(s.weights), lossScaled: true };
    const bytes = encodeState(s);
    expect(bytes.length).toBe(stateBytes(n, true));
    expect(stateBytes(n, true) - stateBytes(n)).toBe(LOSS_SCALE_BYTES);
    expect(decodeState(bytes, want).lossScale).toEqual(LS);
    // A fractional factor survives exactly (f64 on the wire; the trainer compares it with its plan's).
    expect(decodeState(encodeState({ ...s, lossScale: { ...LS, backoffFactor: 0.3 } }), want).lossScale?.backoffFactor).toBe(0.3);
    // Without loss scaling the message is what it was (no trailer, no field).
    const plain = state(n, 3);
    expect(encodeState(plain).length).toBe(stateBytes(n));
    expect(decodeState(encodeState(plain), { ...want, lossScaled: false }).lossScale).toBeUndefined();
    expect(() => decodeState(encodeState(plain), want)).toThrow(/expected .* and the loss scaler/);
    expect(() => decodeState(bytes, { ...want, lossScaled: false })).toThrow(/expected/);
    const tail = bytes.length - LOSS_SCALE_BYTES;
    const flipped = bytes.slice();
    flipped[tail + 7] ^= 1;
    expect(() => decodeState(flipped, want)).toThrow(/checksum/);
    const zero = bytes.slice();
    new DataView(zero.buffer).setFloat64(tail, 0, true);
    expect(() => decodeState(reseal(zero), want)).toThrow(/invalid loss scaler/);
    const nan = bytes.slice();
    new DataView(nan.buffer).setFloat64(tail + 8, NaN, true);
    expect(() => decodeState(reseal(nan), want)).toThrow(/invalid loss scaler/);
  });

  it('a joiner receives the scaler with the state (handOver) and restores it; a diverged one fails the digest', async () => {
    const n = 50;
    const src = state(n, 4, LS);
    const payload = encodeState(src);
    const round = 256;
    const run = async (vouched: Uint8Array) => {
      // The receiving rank 1 of two; rank 0 (the source) sends the payload in rounds.
      let i = 0;
      const g = {
        rank: 1, members: ['a', 'b'], size: 2,
        allToAll: async () => [payload.subarray(i * round, Math.min(payload.length, ++i * round)), new Uint8Array(0)],
      } as unknown as PeerGroup;
      const restored: FlatTrainingState[] = [];
      const trainer = {
        model: { layout: { totalFloats: n } }, plan: { model: { lossScale: { initScale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000 } } },
        stepIndex: 9, restoreTrainingState: (s: FlatTrainingState) => restored.push(s),
      } as unknown as Trainer;
      const announced: GroupStatus = { fingerprint: 1, epoch: 2, members: ['a', 'b'], step: 9, weightsHash: weightsHash(src.weights), established: true, stateDigest: vouched };
      await handOver(g, trainer, 0, [1], announced, round, () => {});
      return restored;
    };
    const got = await run(await stateDigest(src));
    expect(got).toHaveLength(1);
    expect(got[0].lossScale).toEqual(LS);
    // The majority vouched for another scaler state than the one that arrived: nothing is applied.
    await expect(run(await stateDigest({ ...src, lossScale: { ...LS, growthTracker: 0 } }))).rejects.toThrow(/state digest differs/);
  });
});
