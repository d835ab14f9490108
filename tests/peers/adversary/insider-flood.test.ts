/**
 * An insider flooding a member's mailbox (issue 38: sixteen 32 MiB messages per step on unused
 * tags took honest RSS from ~410 to 1,339 MiB, unnamed): big messages on tags no collective has
 * reached, on the next step's, and an oversized message on a tag the exchange reserved with a
 * size. The member holds at most its per-peer bound, names the insider, and the exchange goes on.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/collectives/allreduce';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { DEFAULT_SCREEN } from '../../../src/peers/collectives/screen';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { FRAME, Insider } from './insider';

const RUN = 9;
const MEMBERS = ['p0', 'p1', 'p2'];
const MiB = 1 << 20;

describe('an insider flooding the mailbox', () => {
  it('big messages on unused and future tags, and an oversized commitment: memory bounded per peer, the insider named, the exchange completes without it', async () => {
    const hub = new LoopbackHub();
    const evil = new Insider(hub.endpoint('p2'));
    const abuse: [string, string][][] = [[], []];
    const groups = ['p0', 'p1'].map((id, i) => new PeerGroup(hub.endpoint(id), {
      runId: RUN, timeoutMs: 15_000, members: MEMBERS, maxBufferedBytesPerPeer: MiB / 2, onAbuse: (p, why) => abuse[i].push([p, why]),
    }));
    const junk = new Uint8Array(MiB / 4).fill(7);
    let peak = 0;
    // Sixteen 256 KiB messages to each on tags 20..35 of this step and of the next.
    for (let k = 0; k < 16; k++) {
      for (const p of ['p0', 'p1']) evil.send(p, FRAME.allGather, RUN, k & 1, 20 + k, junk);
      await new Promise((r) => setTimeout(r, 0));
      peak = Math.max(peak, ...groups.map((g) => g.heldBytes('p2')));
    }
    expect(peak).toBeLessThanOrEqual(MiB / 2);
    for (const a of abuse) {
      expect(a.length).toBeGreaterThan(0);
      expect(a.every(([p]) => p === 'p2')).toBe(true);
      expect(a[0][1]).toMatch(/held for collectives not started, above 524288 B/);
    }
    // The exchange: a 256 KiB "commitment" (a slot is 128 B) is refused at its first frame; then it withholds.
    const x = [Float32Array.of(1, 2, 3), Float32Array.of(1.5, 2.5, 2)];
    const runs = groups.map((g, r) => allReduceMean(g, x[r], { mode: 'fp32', screen: DEFAULT_SCREEN, graceMs: 200 }));
    for (const p of ['p0', 'p1']) evil.send(p, FRAME.allGather, RUN, 0, 0, new Uint8Array(MiB / 4));
    const res = await Promise.all(runs);
    for (const r of res) {
      expect(r.excluded.map((e) => e.peer)).toEqual(['p2']);
      expect(Array.from(r.out)).toEqual([1.25, 2.25, 2.5]);
    }
    for (const a of abuse) expect(a.some(([p, why]) => p === 'p2' && /message for tag 0, which takes at most 128 B/.test(why))).toBe(true);
    for (const g of groups) expect(g.heldBytes('p2')).toBeLessThanOrEqual(MiB / 2);
  }, 30_000);
});
