/**
 * Abuse one member alone cannot prove, removed by a majority's accusations (issue 38: a flood on
 * unused tags and a contribution withheld from some members were bounded or relayed and named,
 * never removed). Three honest members (PeerGroup + allReduceMean with the data-parallel screen)
 * and an insider speaking raw frames (insider.ts). Each honest member lists whom it saw abuse from
 * in its end-of-step report (here: the lists the member group would send); `Accusations` removes a
 * member a strict majority of the others accuse `strikes` steps in a row, and nobody on one word.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/collectives/allreduce';
import { DEFAULT_SCREEN } from '../../../src/peers/collectives/screen';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { Accusations } from '../../../src/parallel/dp/joins';
import { Rng } from '../../../src/engine/util/rng';
import { f32, FRAME, Insider } from './insider';

const RUN = 13;
const n = 500;
const HONEST = ['p0', 'p1', 'p2'];
const MEMBERS = [...HONEST, 'p3'];
const KiB = 1024;
const STRIKES = DEFAULT_SCREEN.strikes!;

function setup() {
  const hub = new LoopbackHub();
  const accused: Set<string>[] = HONEST.map(() => new Set());
  const groups = HONEST.map((id, i) => new PeerGroup(hub.endpoint(id), {
    runId: RUN, timeoutMs: 5000, members: MEMBERS, maxBufferedBytesPerPeer: 64 * KiB, onAbuse: (p) => accused[i].add(p),
  }));
  return { groups, evil: new Insider(hub.endpoint('p3')), accused };
}

/** The step's reports' accusation lists (the insider accuses nobody), then cleared as the member group does. */
function reports(accused: Set<string>[]): string[][] {
  const lists = [...accused.map((a) => [...a].sort()), []];
  accused.forEach((a) => a.clear());
  return lists;
}

describe('an insider flooding or withholding, step after step', () => {
  it('flooding two of three honest members over their bound: accused by a majority, removed after `strikes` steps; flooding one: named, never removed', async () => {
    for (const targets of [['p0', 'p1'], ['p0']]) {
      const { groups, evil, accused } = setup();
      const acc = new Accusations(STRIKES);
      const removed: string[][] = [];
      for (let s = 0; s < STRIKES; s++) {
        groups.forEach((g) => g.setStep(s));
        // Twelve 16 KiB messages on unused tags of this step: 192 KiB against a 64 KiB bound.
        for (let k = 0; k < 12; k++) for (const p of targets) evil.send(p, FRAME.allGather, RUN, s, 40 + k, new Uint8Array(16 * KiB));
        await new Promise((r) => setTimeout(r, 20));
        removed.push(acc.record(MEMBERS, reports(accused)));
      }
      for (const g of groups) expect(g.heldBytes('p3')).toBeLessThanOrEqual(64 * KiB);
      if (targets.length === 2) expect(removed).toEqual([[], [], ['p3']]);
      else expect(removed.flat()).toEqual([]);
      groups.forEach((g) => g.close());
    }
  });

  it('withholding its contribution from two of three honest members: relayed, the means equal, accused by a majority and removed after `strikes` steps; nobody honest accused', async () => {
    const { groups, evil, accused } = setup();
    const acc = new Accusations(STRIKES);
    const removed: string[][] = [];
    for (let s = 0; s < STRIKES; s++) {
      groups.forEach((g) => g.setStep(s));
      const xs = HONEST.map((_, k) => new Rng(10 * s + k).normalArray(n, 1).map((v, i) => v + Math.sin(i)));
      const runs = groups.map((g, r) => allReduceMean(g, xs[r], { mode: 'fp32', screen: DEFAULT_SCREEN, graceMs: 50 }).then((res) => {
        for (const x of res.notices) accused[r].add(x.peer);
        return res;
      }));
      const commits = await Promise.all(HONEST.map((p) => evil.recv(p, RUN, s, 0)));
      const c = f32.encode(new Rng(99 + s).normalArray(n, 1).map((v, i) => v + Math.sin(i)));
      const cm = evil.commitment(Insider.context(RUN, s, 0, MEMBERS), c);
      const row = Insider.row([...commits.map((x) => Insider.slot(x)), Insider.slot(cm)]);
      for (const p of HONEST) {
        evil.send(p, FRAME.allGather, RUN, s, 0, cm);
        evil.send(p, FRAME.allGather, RUN, s, 1, row);
        if (p === 'p2') evil.send(p, FRAME.allGather, RUN, s, 2, c);
      }
      await Promise.all(HONEST.map((p) => evil.recv(p, RUN, s, 2)));
      for (const p of HONEST) evil.send(p, FRAME.allGather, RUN, s, 3, row);
      const res = await Promise.all(runs);
      for (const r of res) {
        expect(r.excluded).toEqual([]); // relayed by p2: summed alike everywhere
        expect(Buffer.from(r.out.buffer).equals(Buffer.from(res[0].out.buffer))).toBe(true);
      }
      const lists = reports(accused);
      expect(lists).toEqual([['p3'], ['p3'], [], []]);
      removed.push(acc.record(MEMBERS, lists));
    }
    expect(removed).toEqual([[], [], ['p3']]);
  }, 30_000);
});
