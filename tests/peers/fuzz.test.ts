import { describe, expect, it, vi } from 'vitest';
import { allReduceMean } from '../../src/peers/collectives/allreduce';
import { crc32, crc32Update } from '../../src/peers/collectives/crc32';
import { encodeFrame, FrameType, HEADER_BYTES } from '../../src/peers/collectives/framing';
import { PeerGroup, Skips } from '../../src/peers/collectives/group';
import { Rng } from '../../src/engine/util/rng';
import { makeGroups, settle } from './helpers';

const RUN = 7;
const STEP = 5;
const CHUNK = 1000;

function reseal(f: Uint8Array): Uint8Array {
  const c = crc32Update(crc32(f.subarray(0, 40)), f.subarray(HEADER_BYTES));
  new DataView(f.buffer, f.byteOffset).setUint32(40, c, true);
  return f;
}

type Maker = (rng: Rng, nextTag: number) => Uint8Array;

const frame = (o: Partial<{ type: FrameType; runId: number; step: number; tag: number; idx: number; count: number; total: number }>, payload: Uint8Array) =>
  encodeFrame(
    {
      type: o.type ?? FrameType.AllToAll,
      runId: o.runId ?? RUN,
      step: o.step ?? STEP,
      tag: o.tag ?? 0,
      seq: 1,
      chunkIndex: o.idx ?? 0,
      chunkCount: o.count ?? 1,
      totalLength: o.total ?? payload.length,
    },
    payload,
  );
const rand = (rng: Rng, n: number) => Uint8Array.from({ length: n }, () => rng.int(256));
const nanBytes = (n: number) => {
  const f = new Float32Array(n).fill(NaN);
  return new Uint8Array(f.buffer);
};
const set = (f: Uint8Array, off: number, v: number, size: 1 | 4) => {
  const dv = new DataView(f.buffer, f.byteOffset);
  if (size === 1) dv.setUint8(off, v);
  else dv.setUint32(off, v >>> 0, true);
  return f;
};

/** Frames every peer must reject on structure alone (safe to inject while a collective runs). */
const structural: Record<string, Maker> = {
  random: (rng) => rand(rng, rng.int(2 * CHUNK)),
  truncated: (rng, t) => {
    const f = frame({ tag: t }, rand(rng, 1 + rng.int(CHUNK)));
    return f.subarray(0, rng.int(f.length));
  },
  oversized: (rng, t) => frame({ tag: t }, rand(rng, CHUNK + 1 + rng.int(4 * CHUNK))),
  wrongVersion: (rng, t) => reseal(set(frame({ tag: t }, rand(rng, 10)), 4, 2 + rng.int(254), 1)),
  badMagic: (rng, t) => reseal(set(frame({ tag: t }, rand(rng, 10)), 0, rng.nextU32(), 4)),
  unknownType: (rng, t) => reseal(set(frame({ tag: t }, rand(rng, 10)), 5, [0, 5, 6, 255][rng.int(4)], 1)),
  badChecksum: (rng, t) => {
    const f = frame({ tag: t }, nanBytes(1 + rng.int(200)));
    f[rng.int(f.length)] ^= 1 << rng.int(8);
    return f;
  },
  nanNoCrc: (rng) => {
    const f = new Uint8Array(nanBytes(11 + rng.int(200)));
    set(f, 0, 0x47504757, 4);
    return set(f, 4, 1, 1);
  },
  chunkIndexPastCount: (rng, t) => reseal(set(frame({ tag: t, count: 2, total: 20 }, rand(rng, 10)), 24, 2 + rng.int(9), 4)),
  lengthLies: (rng, t) => reseal(set(frame({ tag: t }, rand(rng, 10)), 32, 11 + rng.int(100), 4)),
  wrongRunNaN: (rng, t) => frame({ tag: t, runId: RUN + 1 + rng.int(100) }, nanBytes(50)),
  hugeMessage: (rng, t) => frame({ tag: t, count: 3, total: 0xfffffff0 }, rand(rng, 10)),
};

/** Well-formed frames that are stale or out of window: rejected only while no collective waits. */
const contextual: Record<string, Maker> = {
  staleStep: (rng, t) => frame({ tag: t, step: rng.int(STEP) }, nanBytes(4)),
  farStep: (rng, t) => frame({ tag: t, step: STEP + 2 + rng.int(1000) }, nanBytes(4)),
  staleTag: (rng, t) => frame({ tag: rng.int(t) }, nanBytes(4)),
  farTag: (rng, t) => frame({ tag: t + 64 + rng.int(1000) }, nanBytes(4)),
};

async function cleanResult(gs: Float32Array[]): Promise<Float32Array> {
  const { groups } = makeGroups(gs.length);
  return (await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8' }))))[0].out;
}

describe('fuzzed frames', () => {
  it('thousands of bad frames are rejected, state unchanged, then a collective succeeds', async () => {
    const N = 4;
    const { hub, groups, rejects } = makeGroups(N, { chunkPayload: CHUNK, timeoutMs: 3000 });
    const intruder = hub.endpoint('zz'); // connected, but not a member of the groups
    for (const g of groups) g.setStep(STEP);
    await Promise.all(groups.map((g) => g.barrier())); // nextTag = 1
    const before = groups.map((g) => g.state());
    expect(before[0]).toEqual({ step: STEP, nextTag: 1, buffered: 0, inFlight: 0, waiting: 0 });

    const rng = new Rng(1234);
    const makers = { ...structural, ...contextual };
    const names = Object.keys(makers);
    let injected = 0;
    for (let i = 0; i < 3000; i++) {
      const name = names[i % names.length];
      const to = rng.int(N);
      const from = (to + 1 + rng.int(N - 1)) % N;
      hub.inject(`p${from}`, `p${to}`, makers[name](rng, 1));
      injected++;
      if (i % 100 === 0) {
        intruder.send(`p${to}`, frame({ tag: 1 }, nanBytes(4))); // well-formed, but from a stranger
        injected++;
      }
    }
    await settle();
    expect(rejects.flat().length).toBe(injected);
    expect(rejects.flat().filter((r) => r.peer === 'zz').every((r) => /not a member/.test(r.reason))).toBe(true);
    expect(groups.map((g) => g.state())).toEqual(before);

    const gs = Array.from({ length: N }, (_, r) => new Rng(r).normalArray(3000));
    const want = await cleanResult(gs);

    // Structural garbage keeps arriving while the all-reduce runs.
    let stop = false;
    const noise = (async () => {
      let t = 0;
      while (!stop) {
        const snames = Object.keys(structural);
        for (let k = 0; k < 20; k++) hub.inject(`p${rng.int(N)}`, `p${rng.int(N)}`, structural[snames[t++ % snames.length]](rng, 1));
        await settle();
      }
    })().catch(() => {});
    const got = await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8' })));
    stop = true;
    await noise;
    for (const x of got) expect(Buffer.from(x.out.buffer).equals(Buffer.from(want.buffer))).toBe(true);
    expect(rejects.flat().length).toBeGreaterThan(injected);
    for (const g of groups) expect(g.state()).toMatchObject({ buffered: 0, inFlight: 0, waiting: 0 });
  });

  it('well-formed frames in the wrong place: type mismatch, duplicates, full mailbox', async () => {
    const { hub, groups, rejects } = makeGroups(2, { maxBufferedPerPeer: 3 });
    const [g0, g1] = groups;
    const forge = (tag: number, type = FrameType.AllGather) => hub.inject('p1', 'p0', frame({ type, step: 0, tag }, Uint8Array.of(42)));
    // Rank 0 waits on tag 0 (all-gather); p1 forges a broadcast frame for that tag.
    const pending = g0.allGather(Uint8Array.of(0));
    forge(0, FrameType.Broadcast);
    await settle();
    expect(rejects[0].map((r) => r.reason)).toEqual([expect.stringMatching(/type/)]);
    // Future tags are buffered once; a second copy is a duplicate; the mailbox holds at most 3.
    forge(5);
    forge(5);
    forge(6);
    forge(7);
    forge(8);
    await settle();
    expect(rejects[0].slice(1).map((r) => r.reason)).toEqual([expect.stringMatching(/duplicate/), expect.stringMatching(/mailbox full/)]);
    expect(g0.state()).toMatchObject({ buffered: 3, waiting: 1 });
    // The real all-gather still completes with p1's genuine payload.
    const [out] = await Promise.all([pending, g1.allGather(Uint8Array.of(1))]);
    expect(out.map((m) => m[0])).toEqual([0, 1]);
    // Moving to the next step drops what was buffered for this one.
    g0.setStep(1);
    expect(g0.state()).toEqual({ step: 1, nextTag: 0, buffered: 0, inFlight: 0, waiting: 0 });
  });

  it('reserved tags: collectives at them run in any order; their early frames are admitted, bounded by the mailbox; used or unreserved tags stay stale', async () => {
    const { hub, groups, rejects } = makeGroups(2, { maxBufferedPerPeer: 4, maxTagsAhead: 2 });
    const [g0, g1] = groups;
    const forge = (tag: number) => hub.inject('p1', 'p0', frame({ type: FrameType.AllGather, step: 0, tag }, Uint8Array.of(42)));
    expect(() => g0.reserveTags(5)).toThrow(/outside \[1, 4\]/);
    const base = [g0.reserveTags(4), g1.reserveTags(4)];
    expect(base).toEqual([0, 0]);
    expect(g0.state().nextTag).toBe(4);
    await expect(g0.allGatherSomeAt(4, Uint8Array.of(0), new Skips())).rejects.toThrow(/not reserved/);
    // p1 runs tag 3, then 1; rank 0 the other way round, later: p1's frames, below rank 0's counter, wait as reserved.
    const p1 = Promise.all([3, 1].map((t) => g1.allGatherSomeAt(t, Uint8Array.of(10 + t), new Skips())));
    await settle();
    expect(g0.state().buffered).toBe(2);
    const p0 = Promise.all([1, 3].map((t) => g0.allGatherSomeAt(t, Uint8Array.of(t), new Skips())));
    const [a, b] = await Promise.all([p0, p1]);
    expect(a.map((x) => x.map((m) => m![0]))).toEqual([[1, 11], [3, 13]]);
    expect(b.map((x) => x.map((m) => m![0]))).toEqual([[3, 13], [1, 11]]);
    expect(rejects.flat()).toEqual([]);
    // A used reserved tag, an unreserved tag below the counter, and one past the window: stale. A
    // still-reserved tag: admitted once (then a duplicate), within the mailbox's bound.
    forge(1);
    forge(9);
    forge(2);
    forge(2);
    await settle();
    expect(rejects[0].map((r) => r.reason)).toEqual([expect.stringMatching(/stale or too far/), expect.stringMatching(/stale or too far/), expect.stringMatching(/duplicate/)]);
    expect(g0.state().buffered).toBe(1);
    g0.setStep(1);
    forge(2);
    await settle();
    expect(rejects[0].at(-1)!.reason).toMatch(/step 0 outside|stale/);
  });

  it('a throwing onReject handler or message listener cannot break the receive path', async () => {
    const { hub, groups } = makeGroups(2);
    groups[0].close();
    let calls = 0;
    const g = new PeerGroup(groups[0].transport, {
      runId: 7,
      onReject: () => {
        calls++;
        throw new Error('handler bug');
      },
    });
    g.transport.onMessage(() => {
      throw new Error('listener bug');
    });
    const quiet = vi.spyOn(console, 'error').mockImplementation(() => {});
    try {
      for (let i = 0; i < 50; i++) hub.inject('p1', 'p0', Uint8Array.of(i));
      await settle();
      expect(calls).toBe(50);
      const out = await Promise.all([g, groups[1]].map((x) => x.allGather(Uint8Array.of(x.rank))));
      expect(out[0].map((m) => m[0])).toEqual([0, 1]);
    } finally {
      quiet.mockRestore();
    }
  });
});
