/**
 * An insider against the verifiable all-reduce: two honest members (PeerGroup + allReduceMean with
 * the data-parallel screen) and one insider speaking raw frames (insider.ts). The insider sends its
 * contribution after it has seen the honest ones, so it can aim at them.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/allreduce';
import { DEFAULT_SCREEN } from '../../../src/peers/dp-screen';
import { PeerGroup } from '../../../src/peers/group';
import { LoopbackHub } from '../../../src/peers/loopback';
import { Rng } from '../../../src/engine/util/rng';
import { f32, FRAME, Insider } from './insider';

const RUN = 7;
const n = 3000;

/** Honest gradients of one direction plus per-member noise (cosine ≈ 0.6 between members). */
function honest(seed: number): Float32Array[] {
  const base = new Rng(seed).normalArray(n, 1);
  return [1, 2].map((k) => {
    const noise = new Rng(seed * 10 + k).normalArray(n, 0.8);
    return base.map((v, i) => v + noise[i]);
  });
}

/** The 2-member run without the insider: what the honest members must end with when it is left out. */
async function reference(gs: Float32Array[]): Promise<Float32Array> {
  const { transports } = LoopbackHub.group(2);
  const groups = transports.map((t) => new PeerGroup(t, { runId: RUN, timeoutMs: 5000 }));
  return (await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN }))))[0].out;
}

type Attack = (seen: Float32Array[]) => { to: Float32Array[] | Float32Array; echo?: (got: Uint8Array[], to: string) => Uint8Array };

async function attack(a: Attack) {
  const hub = new LoopbackHub();
  const t = ['p0', 'p1'].map((id) => hub.endpoint(id));
  const evil = new Insider(hub.endpoint('p2')); // sorts last: the honest ranks are 0 and 1, as in the reference
  const groups = t.map((x) => new PeerGroup(x, { runId: RUN, timeoutMs: 3000, members: ['p0', 'p1', 'p2'] }));
  const gs = honest(5);
  const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN }));
  const seen = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 0)));
  const plan = a(seen.map(f32.decode));
  const mine = (i: number) => f32.encode(Array.isArray(plan.to) ? plan.to[i] : plan.to);
  ['p0', 'p1'].forEach((p, i) => evil.send(p, FRAME.allGather, RUN, 0, 0, mine(i)));
  ['p0', 'p1'].forEach((p, i) => {
    const got = [seen[0], seen[1], mine(i)];
    evil.send(p, FRAME.allGather, RUN, 0, 1, plan.echo ? plan.echo(got, p) : Insider.echo(got));
  });
  const res = await Promise.all(runs);
  return { res, ref: await reference(gs), gs };
}

const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer).equals(Buffer.from(b.buffer));

describe('an insider against the verifiable all-reduce (3 members, fp32, default screen)', () => {
  const cases: [string, Attack, RegExp, boolean][] = [
    ['−1000 × the true mean (a "poisoned reduced chunk")', (s) => ({ to: s[0].map((v, i) => -1000 * (v + s[1][i]) / 2) }), /norm .* above 4 × the others' median/, false],
    ['sign-flipped', (s) => ({ to: s[0].map((v, i) => -(v + s[1][i]) / 2) }), /cosine -?\d\.\d+ with the others' mean, below -0.2/, false],
    ['NaN', (s) => ({ to: s[0].map(() => NaN) }), /non-finite/, false],
    ['a different contribution to each member', (s) => ({ to: [s[0], s[1].map((v) => -3 * v)] }), /sent different contributions to different members/, true],
    ['an echo that misreports both honest contributions', (s) => ({ to: s[0], echo: (got) => Insider.echo([got[1], got[0], got[2]]) }), /misreported p0, p1's contribution/, true],
  ];

  it.each(cases)('%s: left out on both honest members, named, the mean equals the run without it', async (_, a, why, fault) => {
    const { res, ref } = await attack(a);
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', fault]]);
      expect(r.excluded[0].why).toMatch(why);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  it('noise within the screen is summed; the mean stays within the stated tolerance (k·median + |ref|)/3', async () => {
    const { res, ref, gs } = await attack((s) => ({ to: new Rng(9).normalArray(n, 1.5).map((v, i) => v + (s[0][i] + s[1][i]) / 2) }));
    const norm = (x: ArrayLike<number>) => Math.sqrt(Array.from(x).reduce((a, v) => a + v * v, 0));
    const med = (norm(gs[0]) + norm(gs[1])) / 2;
    expect(same(res[0].out, res[1].out)).toBe(true);
    expect(res[0].excluded).toEqual([]);
    const diff = norm(res[0].out.map((v, i) => v - ref[i]));
    expect(diff).toBeGreaterThan(0);
    expect(diff).toBeLessThanOrEqual((DEFAULT_SCREEN.normK * med + norm(ref)) / 3);
  });

  it('INT8: a NaN scale sent to one member only: both name and fault the sender at once, nobody stalls', async () => {
    const hub = new LoopbackHub();
    const evil = new Insider(hub.endpoint('p2'));
    const groups = ['p0', 'p1'].map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, timeoutMs: 3000, members: ['p0', 'p1', 'p2'] }));
    const gs = honest(6);
    const t0 = Date.now();
    const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8', screen: DEFAULT_SCREEN }));
    const seen = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 0)));
    const good = seen[1].slice();
    const bad = good.slice();
    new DataView(bad.buffer).setFloat32(0, NaN, true); // the first block's scale
    evil.send('p0', FRAME.allGather, RUN, 0, 0, bad);
    evil.send('p1', FRAME.allGather, RUN, 0, 0, good);
    evil.send('p0', FRAME.allGather, RUN, 0, 1, Insider.echo([seen[0], seen[1], bad]));
    evil.send('p1', FRAME.allGather, RUN, 0, 1, Insider.echo([seen[0], seen[1], good]));
    const res = await Promise.all(runs);
    expect(Date.now() - t0).toBeLessThan(3000); // within one collective timeout
    const { transports } = LoopbackHub.group(2);
    const ref = (await Promise.all(transports.map((t, r) => allReduceMean(new PeerGroup(t, { runId: RUN }), gs[r], { mode: 'int8', screen: DEFAULT_SCREEN }))))[0].out;
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', true]]);
      expect(r.excluded[0].why).toMatch(/sent different contributions to different members/);
      expect(same(r.out, ref)).toBe(true);
    }
  });
});
