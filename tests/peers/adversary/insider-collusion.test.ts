/**
 * Two colluding insiders against the verifiable all-reduce in a group of 5 (three honest members:
 * PeerGroup + allReduceMean with the data-parallel screen and MemberGuard; two insiders speaking raw
 * frames, insider.ts). They share everything, commit blind (the honest contributions come after
 * every commitment), and try (1) to frame the honest members: each insider's contribution is
 * built so that it objects to every honest member (tiny, so each honest norm is above normK × it),
 * three steps in a row, then (2) to poison the mean with the same −1000 × last step's honest mean.
 * An honest member collects at most the two insiders' objections of its four peers, never a strict
 * majority: nobody honest is struck or removed; the poisoned contributions are left out on every
 * honest member (three honest objections each), the means equal the three honest ones' alone,
 * and the guard removes both insiders after `strikes` steps.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/collectives/allreduce';
import { DEFAULT_SCREEN, MemberGuard } from '../../../src/peers/collectives/screen';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { Rng } from '../../../src/engine/util/rng';
import { f32, FRAME, Insider } from './insider';

const RUN = 11;
const n = 1000;
const HONEST = ['p0', 'p1', 'p2'];
const EVIL = ['p3', 'p4'];
const MEMBERS = [...HONEST, ...EVIL];

/** Step s's honest gradients: one shared direction plus per-member noise (pair cosines ≈ 0.6). */
function honest(s: number): Float32Array[] {
  const base = new Rng(100 + s).normalArray(n, 1);
  return HONEST.map((_, k) => {
    const noise = new Rng(1000 * s + k + 1).normalArray(n, 0.8);
    return base.map((v, i) => v + noise[i]);
  });
}

/** The three honest members alone at step s: what the means must equal when both insiders are left out. */
async function alone(gs: Float32Array[]): Promise<Float32Array> {
  const { transports } = LoopbackHub.group(3);
  const groups = transports.map((t) => new PeerGroup(t, { runId: RUN, timeoutMs: 5000 }));
  return (await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN }))))[0].out;
}

const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer).equals(Buffer.from(b.buffer));

describe('two colluding insiders among five', () => {
  it('objecting to every honest member for 3 steps strikes nobody honest; the same −1000 × mean from both is left out, the means equal the honest three alone, both removed', async () => {
    const hub = new LoopbackHub();
    const groups = HONEST.map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, timeoutMs: 5000, members: MEMBERS }));
    const evil = EVIL.map((id) => new Insider(hub.endpoint(id)));
    const guards = HONEST.map(() => new MemberGuard(DEFAULT_SCREEN.strikes!, 60_000));
    let last: Float32Array | null = null;
    const removed: string[][] = HONEST.map(() => []);
    for (let s = 0; s < 6; s++) {
      const gs = honest(s);
      groups.forEach((g) => g.setStep(s));
      const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN }));
      const commits = await Promise.all(evil.map((e) => Promise.all(HONEST.map((p) => e.recv(p, RUN, s, 0)))));
      // Blind: built from what they saw last step (the first three steps: tiny, to object to everyone).
      const frame = s < 3;
      const mine = EVIL.map((_, j) => frame
        ? new Rng(7 + 10 * s + j).normalArray(n, 1e-3)
        : last!.map((v) => -1000 * v));
      const c = mine.map(f32.encode);
      const ctx = Insider.context(RUN, s, 0, MEMBERS);
      const cm = evil.map((e, j) => e.commitment(ctx, c[j]));
      const row = (j: number) => Insider.row([...commits[j].map((x) => Insider.slot(x)), ...cm.map((x) => Insider.slot(x))]);
      evil.forEach((e, j) => HONEST.forEach((p) => {
        e.send(p, FRAME.allGather, RUN, s, 0, cm[j]);
        e.send(p, FRAME.allGather, RUN, s, 1, row(j));
        e.send(p, FRAME.allGather, RUN, s, 2, c[j]);
      }));
      const seen = (await Promise.all(HONEST.map((p) => evil[0].recv(p, RUN, s, 2)))).map(f32.decode);
      evil.forEach((e, j) => HONEST.forEach((p) => e.send(p, FRAME.allGather, RUN, s, 3, row(j))));
      const res = await Promise.all(runs);
      last = seen[0].map((_, i) => (seen[0][i] + seen[1][i] + seen[2][i]) / 3);
      for (const r of res) expect(same(r.out, res[0].out)).toBe(true);
      res.forEach((r, h) => removed[h].push(...guards[h].record(MEMBERS, r.excluded).map((e) => e.peer)));
      for (const r of res) expect(r.excluded.filter((e) => HONEST.includes(e.peer))).toEqual([]);
      if (frame) {
        // Summed (small, within the bound): the mean keeps the honest direction, 3/5 of its length.
        expect(res[0].excluded).toEqual([]);
        const ref = await alone(gs);
        const dot = (a: Float32Array, b: Float32Array) => a.reduce((acc, v, i) => acc + v * b[i], 0);
        expect(dot(res[0].out, ref) / dot(ref, ref)).toBeCloseTo(0.6, 2);
      } else {
        for (const r of res) {
          expect(r.excluded.map((e) => e.peer)).toEqual(EVIL);
          expect(r.excluded[0].why).toMatch(/3 of the other 4 object/);
          expect(same(r.out, await alone(gs))).toBe(true);
        }
      }
    }
    for (const r of removed) expect(r.sort()).toEqual(EVIL);
  }, 30_000);
});
