import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { CollectiveError, PeerGroup } from '../../src/peers/collectives/group';
import { limitTransport } from '../../src/peers/transport/limiter';
import { Rng } from '../../src/engine/util/rng';
import { bytesOf, makeGroups } from './helpers';

const blob = (n: number, seed: number) => Uint8Array.from(new Rng(seed).uniformArray(n, 0, 256), Math.floor);

describe('collectives over loopback', () => {
  it.each([2, 3, 5, 8])('%i peers: broadcast, all-gather, all-to-all, barrier (multi-chunk, reordered)', async (n) => {
    // Small chunks and a reordering hub: messages span many frames that arrive out of order.
    const { groups, rejects } = makeGroups(n, { chunkPayload: 200 }, { reorder: { seed: n } });
    expect(groups.map((g) => g.rank)).toEqual([...Array(n).keys()]);
    const root = n - 1;
    const b = await Promise.all(groups.map((g) => g.broadcast(root, g.rank === root ? blob(1001, 1) : undefined)));
    for (const x of b) expect(x).toEqual(blob(1001, 1));

    const ag = await Promise.all(groups.map((g) => g.allGather(blob(100 * g.rank + 7, g.rank))));
    for (const x of ag) expect(x).toEqual(groups.map((_, r) => blob(100 * r + 7, r)));

    const a2a = await Promise.all(groups.map((g) => g.allToAll(groups.map((_, to) => blob(37 * to + 300, 10 * g.rank + to)))));
    a2a.forEach((x, me) => expect(x).toEqual(groups.map((_, from) => blob(37 * me + 300, 10 * from + me))));

    await Promise.all(groups.map((g) => g.barrier()));
    expect(rejects.flat()).toEqual([]);
    for (const g of groups) expect(g.state()).toEqual({ step: 0, nextTag: 4, buffered: 0, inFlight: 0, waiting: 0 });
  });

  it('interleaved collectives and steps do not mix (a fast peer runs ahead)', async () => {
    const { groups, rejects } = makeGroups(3);
    const run = async (g: PeerGroup, delay: number) => {
      const out: Uint8Array[][] = [];
      for (let step = 0; step < 3; step++) {
        g.setStep(step);
        if (delay) await new Promise((r) => setTimeout(r, delay));
        // Two collectives in flight at once: tags 0 and 1 of this step.
        const [x, y] = await Promise.all([g.allGather(Uint8Array.of(step, g.rank, 0)), g.allGather(Uint8Array.of(step, g.rank, 1))]);
        out.push(x, y);
      }
      return out;
    };
    const res = await Promise.all(groups.map((g, i) => run(g, i * 5)));
    for (const out of res) {
      out.forEach((x, k) => expect(x.map((m) => [...m])).toEqual([0, 1, 2].map((r) => [k >> 1, r, k & 1])));
    }
    expect(rejects.flat()).toEqual([]);
  });

  it('a peer that stops participating → timeout error; the others continue in a new group', async () => {
    const { groups } = makeGroups(4, { timeoutMs: 100 });
    const live = groups.slice(0, 3);
    const errs = await Promise.all(live.map((g) => g.allGather(Uint8Array.of(g.rank)).catch((e: unknown) => e)));
    for (const e of errs) {
      expect(e).toBeInstanceOf(CollectiveError);
      expect((e as CollectiveError).code).toBe('timeout');
    }
    for (const g of live) expect(g.state().waiting).toBe(0);
    groups[3].close();
    for (const g of live) g.close();
    // A rebuilt group takes a new run id, so stray frames of the failed collective cannot match it.
    const survivors = live.map((g) => new PeerGroup(g.transport, { runId: 8, members: ['p0', 'p1', 'p2'], timeoutMs: 1000 }));
    const ok = await Promise.all(survivors.map((g) => g.allGather(Uint8Array.of(g.rank))));
    for (const x of ok) expect(x.map((m) => m[0])).toEqual([0, 1, 2]);
  });

  it('a peer leaving mid-collective fails it fast with peer-left; the rest carry on', async () => {
    const { groups } = makeGroups(4, { timeoutMs: 5000, chunkPayload: 100 });
    const live = groups.slice(0, 3);
    const pending = live.map((g) => g.allToAll(groups.map(() => blob(5000, g.rank))).catch((e: unknown) => e));
    await new Promise((r) => setTimeout(r, 1));
    groups[3].transport.close();
    const t0 = Date.now();
    const errs = await Promise.all(pending);
    expect(Date.now() - t0).toBeLessThan(1000);
    for (const e of errs) expect((e as CollectiveError).code).toBe('peer-left');
    // Survivors: same transports, a new group of three.
    const survivors = live.map((g) => (g.close(), new PeerGroup(g.transport, { runId: 8, timeoutMs: 1000 })));
    expect(survivors[0].members).toEqual(['p0', 'p1', 'p2']);
    await Promise.all(survivors.map((g) => g.barrier()));
    const err = await groups[3].barrier().catch((e: unknown) => e);
    expect((err as CollectiveError).code).toBe('peer-left');
  });

  it('respects bufferedAmount backpressure over a slow link', async () => {
    // 2 MB/s links; the sender must pause at 8 KiB buffered and still deliver everything.
    const { groups } = makeGroups(2, { highWaterBytes: 8192, lowWaterBytes: 2048, timeoutMs: 5000 }, {}, (t) =>
      limitTransport(t, { bytesPerSecond: 2e6, burstBytes: 4096 }),
    );
    let peak = 0;
    const t = groups[0].transport;
    const send = t.send.bind(t);
    t.send = (peer, bytes) => {
      send(peer, bytes);
      peak = Math.max(peak, t.bufferedAmount(peer));
    };
    const big = blob(200_000, 9);
    const [, got] = await Promise.all([groups[0].broadcast(0, big), groups[1].broadcast(0)]);
    expect(Buffer.from(got).equals(Buffer.from(big))).toBe(true);
    expect(peak).toBeGreaterThan(0);
    expect(peak).toBeGreaterThan(8192); // the limiter did hold data back
    expect(peak).toBeLessThanOrEqual(8192 + 16384); // never more than high water + one frame
  });

  it('a failed collective stops sending its remaining frames (fake timers)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    onTestFinished(() => void vi.useRealTimers());
    // p0's uplink is 200 kB/s; a 1 MB broadcast cannot finish before the 100 ms timeout.
    const { groups } = makeGroups(2, { highWaterBytes: 4096, lowWaterBytes: 1024, timeoutMs: 100 }, {}, (t, i) =>
      i === 0 ? limitTransport(t, { bytesPerSecond: 2e5, burstBytes: 1000 }) : t,
    );
    const receiver = groups[1].broadcast(0).catch((e: unknown) => e);
    const sender = groups[0].broadcast(0, new Uint8Array(1_000_000)).catch((e: unknown) => e);
    await vi.advanceTimersByTimeAsync(100);
    expect(((await sender) as CollectiveError).code).toBe('timeout');
    const sentAtTimeout = groups[0].transport.stats.messagesSent;
    expect(sentAtTimeout).toBeLessThanOrEqual(3); // ≈ 20 kB of 16 kB frames; the other ~60 are never queued
    await vi.advanceTimersByTimeAsync(1000);
    expect(groups[0].transport.stats.messagesSent - sentAtTimeout).toBeLessThanOrEqual(1);
    expect(((await receiver) as CollectiveError).code).toBe('timeout');
  });

  it('rejects construction with > 8 members or without self', () => {
    const { groups } = makeGroups(2);
    expect(() => new PeerGroup(groups[0].transport, { runId: 1, members: ['x', 'y'] })).toThrow(/not among/);
    expect(() => new PeerGroup(groups[0].transport, { runId: 1, members: ['p0', ...'abcdefgh'] })).toThrow(/at most 8/);
    expect(() => new PeerGroup(groups[0].transport, { runId: 1, maxMembers: 0 })).toThrow(/maxMembers/);
  });

  it('maxMembers lets an in-process simulation form a larger group (16 members all-gather)', async () => {
    expect(() => makeGroups(9)).toThrow(/at most 8 members \(got 9\)/);
    const { groups } = makeGroups(16, { maxMembers: 16 });
    expect(groups[5].size).toBe(16);
    expect(() => new PeerGroup(groups[0].transport, { runId: 1, maxMembers: 16, members: ['p0', ...'abcdefghijklmnop'] })).toThrow(/at most 16 members \(got 17\)/);
    const got = await Promise.all(groups.map((g) => g.allGather(bytesOf(g.rank))));
    for (const rows of got) expect(rows.map((b) => b[0])).toEqual([...Array(16).keys()]);
  });
});
