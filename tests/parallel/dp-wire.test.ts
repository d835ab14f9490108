import { describe, expect, it } from 'vitest';
import { crc32 } from '../../src/peers/collectives/crc32';
import { EpochChannels } from '../../src/parallel/dp/channels';
import {
  type ControlMessage, decodeControl, decodeReport, decodeState, decodeStatus, DpKind, DpMessageError, encodeControl, encodeReport,
  encodeState, encodeStatus, fingerprintOf, stateBytes, weightsHash,
} from '../../src/parallel/dp/wire';
import { encodeFrame, FrameType } from '../../src/peers/collectives/framing';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { Rng } from '../../src/engine/util/rng';
import { settle } from '../peers/helpers';

function state(n: number, seed: number, step = 7) {
  const rng = new Rng(seed);
  const v = rng.normalArray(n);
  for (let i = 0; i < n; i++) v[i] = Math.abs(v[i]);
  return { weights: rng.normalArray(n), m: rng.normalArray(n), v, step };
}

/** Re-seals a tampered state message's array checksum, as a lying (not merely noisy) sender would. */
function reseal(bytes: Uint8Array): Uint8Array {
  new DataView(bytes.buffer, bytes.byteOffset).setUint32(16, crc32(bytes.subarray(20)), true);
  return bytes;
}

describe('data-parallel messages', () => {
  it('round-trip every kind', () => {
    const controls: ControlMessage[] = [
      { kind: DpKind.Hello, fingerprint: 0xdeadbeef },
      { kind: DpKind.Welcome, fingerprint: 1, epoch: 9, members: ['a', 'b', 'ü-peer'], publicKey: new Uint8Array(32).fill(1), signature: new Uint8Array(64).fill(2) },
      { kind: DpKind.Claim, fingerprint: 1, epoch: 9, members: ['a'], publicKey: new Uint8Array(32).fill(3), signature: new Uint8Array(64).fill(4) },
      { kind: DpKind.Refuse, reason: 'nope' },
      { kind: DpKind.Bye, reason: '' },
      { kind: DpKind.Heartbeat },
    ];
    for (const c of controls) expect(decodeControl(encodeControl(c))).toEqual(c);
    const st = { fingerprint: 5, epoch: 3, members: ['p0', 'p1'], step: 12, weightsHash: 0xffffffff, established: true, stateDigest: new Uint8Array(32).fill(7) };
    expect(decodeStatus(encodeStatus(st))).toEqual(st);
    const rep = { step: 4, weightsHash: null, loss: 2.5, joiners: ['x'], accused: ['p9'] };
    expect(decodeReport(encodeReport(rep))).toEqual(rep);
    expect(decodeReport(encodeReport({ ...rep, weightsHash: 0 })).weightsHash).toBe(0);
    const s = state(300, 1);
    const got = decodeState(encodeState(s), { n: 300, step: 7, weightsHash: weightsHash(s.weights) });
    expect(got.step).toBe(7);
    for (const k of ['weights', 'm', 'v'] as const) expect(Array.from(got[k])).toEqual(Array.from(s[k]));
  });

  it('a state is checked whole before use: every defect is a DpMessageError naming it', () => {
    const n = 1000;
    const s = state(n, 2);
    const want = { n, step: 7, weightsHash: weightsHash(s.weights) };
    const good = encodeState(s);
    expect(good.length).toBe(stateBytes(n));
    const cases: [string, Uint8Array, RegExp, Partial<typeof want>?][] = [
      ['truncated', good.subarray(0, good.length - 1), /expected/],
      ['one float longer', encodeState(state(n + 1, 2)), /expected/],
      ['empty', new Uint8Array(0), /short/],
      ['not a state', encodeControl({ kind: DpKind.Heartbeat }), /Heartbeat where State/],
      ['bit flip in m', (() => { const b = good.slice(); b[20 + 4 * n + 17] ^= 4; return b; })(), /checksum/],
      ['wrong version (a version-1 peer)', (() => { const b = good.slice(); b[5] = 1; return b; })(), /unsupported version 1/],
      ['another step', good, /announced 8/, { step: 8 }],
      ['another model size', good, /expected/, { n: n - 1 }],
      ['weights other than announced', good, /weights hash/, { weightsHash: want.weightsHash ^ 1 }],
      ['NaN weights, resealed', (() => { const b = good.slice(); new DataView(b.buffer).setFloat32(20 + 4 * 5, NaN, true); return reseal(b); })(), /non-finite weights\[5\]/, { weightsHash: -1 }],
      ['Inf in v, resealed', (() => { const b = good.slice(); new DataView(b.buffer).setFloat32(20 + 4 * (2 * n + 3), Infinity, true); return reseal(b); })(), /non-finite v\[3\]/],
      ['negative v, resealed', (() => { const b = good.slice(); new DataView(b.buffer).setFloat32(20 + 4 * (2 * n + 9), -1, true); return reseal(b); })(), /negative second moment v\[9\]/],
    ];
    for (const [name, bytes, re, patch] of cases) {
      let w = { ...want, ...patch };
      // The NaN case must pass the hash check to reach the finiteness check: announce its real hash.
      if (patch?.weightsHash === -1) {
        const f = new Float32Array(n);
        new Uint8Array(f.buffer).set(bytes.subarray(20, 20 + 4 * n));
        w = { ...want, weightsHash: weightsHash(f) };
      }
      let err: unknown = null;
      try {
        decodeState(bytes, w);
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(DpMessageError);
      expect((err as Error).message, name).toMatch(re);
    }
  });

  it('random and mutated bytes never decode to something unchecked (fuzz)', () => {
    const rng = new Rng(11);
    const samples = [
      encodeControl({ kind: DpKind.Welcome, fingerprint: 1, epoch: 2, members: ['p0', 'p1'], publicKey: new Uint8Array(32), signature: new Uint8Array(64) }),
      encodeStatus({ fingerprint: 1, epoch: 2, members: ['p0'], step: 1, weightsHash: 2, established: false, stateDigest: new Uint8Array(32) }),
      encodeReport({ step: 1, weightsHash: 3, loss: 1, joiners: ['p2', 'p3'], accused: [] }),
    ];
    let rejected = 0;
    for (let i = 0; i < 3000; i++) {
      const base = samples[i % samples.length].slice();
      const b = i % 3 === 0 ? Uint8Array.from({ length: rng.int(60) }, () => rng.int(256)) : base.subarray(0, rng.int(base.length + 1));
      if (i % 3 === 2 && b.length > 0) b[rng.int(b.length)] ^= 1 << rng.int(8);
      for (const dec of [decodeControl, decodeStatus, decodeReport]) {
        try {
          const m = dec(b) as Record<string, unknown>;
          // Whatever decodes is well-formed.
          if ('members' in m) expect(Array.isArray(m.members) && (m.members as string[]).every((x) => typeof x === 'string' && x.length > 0)).toBe(true);
          if ('loss' in m) expect(Number.isFinite(m.loss)).toBe(true);
        } catch (e) {
          expect(e).toBeInstanceOf(DpMessageError);
          rejected++;
        }
      }
    }
    expect(rejected).toBeGreaterThan(8000);
  });

  it('fingerprints ignore key order and see every value', () => {
    expect(fingerprintOf({ a: 1, b: { c: [1, 2], d: 'x' } })).toBe(fingerprintOf({ b: { d: 'x', c: [1, 2] }, a: 1 }));
    expect(fingerprintOf({ a: 1, b: { c: [1, 2] } })).not.toBe(fingerprintOf({ a: 1, b: { c: [2, 1] } }));
    expect(fingerprintOf({ lr: 0.001 })).not.toBe(fingerprintOf({ lr: 0.0010000001 }));
  });
});

describe('EpochChannels', () => {
  const RUN = 0x1234;
  const frame = (runId: number, payload = Uint8Array.of(1, 2, 3)) =>
    encodeFrame({ type: FrameType.AllGather, runId, step: 0, tag: 0, seq: 1, chunkIndex: 0, chunkCount: 1, totalLength: payload.length }, payload);

  function setup() {
    const { hub, transports } = LoopbackHub.group(2);
    const controls: [string, Uint8Array][] = [];
    const rejects: string[] = [];
    const ch = new EpochChannels(transports[1], RUN, (f, p) => controls.push([f, p]), (_, why) => rejects.push(why));
    return { hub, ch, controls, rejects, sender: transports[0] };
  }

  it('routes by epoch: open epoch delivered, later epochs held until they open, older ones dropped, other runs reported', async () => {
    const { ch, rejects, sender } = setup();
    const got: number[] = [];
    const listen = (e: number) => {
      const v = ch.open(e);
      v.onMessage((_, b) => got.push(new DataView(b.buffer, b.byteOffset).getUint32(8, true) & 0xffff));
      ch.release();
    };
    listen(2);
    for (const e of [2, 3, 1, 3]) sender.send('p1', frame(ch.runId(e)));
    sender.send('p1', frame(((RUN + 1) << 16) | 2));
    sender.send('p1', Uint8Array.of(1, 2, 3));
    sender.send('p1', frame(ch.runId(2 + 65)));
    await settle();
    expect(got).toEqual([2]);
    expect(rejects).toEqual([expect.stringMatching(/another run/), expect.stringMatching(/short frame/), expect.stringMatching(/too far ahead/)]);
    expect(ch.epochOf('p0')).toBe(3);
    expect(ch.lastHeard('p0')).toBeGreaterThan(Date.now() - 1000);
    listen(3); // the two held epoch-3 frames arrive now
    expect(got).toEqual([2, 3, 3]);
    // The transport view must not close the caller's transport.
    ch.open(4).close();
    sender.send('p1', frame(ch.runId(4)));
    await settle();
    expect(ch.transport.peers()).toEqual(['p0']);
  });

  it('control frames reach the driver; the hold is bounded', async () => {
    const { ch, controls, rejects, sender } = setup();
    const ctl = new EpochChannels(sender, RUN, () => {}, () => {});
    ctl.sendControl('p1', Uint8Array.of(9, 9));
    await settle();
    expect(controls).toEqual([['p0', Uint8Array.of(9, 9)]]);
    for (let i = 0; i < 600; i++) sender.send('p1', frame(ch.runId(5)));
    await settle();
    expect(rejects.filter((r) => /hold limit/.test(r)).length).toBe(600 - 512);
    ch.close();
  });
});
