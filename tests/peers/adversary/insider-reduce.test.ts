/**
 * An insider against the verifiable all-reduce: two honest members (PeerGroup + allReduceMean with
 * the data-parallel screen) and one insider speaking raw frames (insider.ts). The insider sends its
 * contribution after it has seen the honest ones, so it can aim at them.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/collectives/allreduce';
import { DEFAULT_SCREEN } from '../../../src/peers/collectives/screen';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
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

/**
 * One exchange: `to` is what the insider sends each honest member (signed), `echo` what it echoes to
 * each (default: honest), `withhold` the members it sends nothing of its contribution to.
 */
type Plan = { to: Float32Array[] | Float32Array; echo?: (got: Uint8Array[], to: string, slots: ReturnType<typeof Insider.slot>[]) => Uint8Array; withhold?: string[]; withholdEcho?: string[] };
type Attack = (seen: Float32Array[]) => Plan;

const MEMBERS = ['p0', 'p1', 'p2'];

async function attack(a: Attack, opts: { graceMs?: number } = {}) {
  const hub = new LoopbackHub();
  const t = ['p0', 'p1'].map((id) => hub.endpoint(id));
  const evil = new Insider(hub.endpoint('p2')); // sorts last: the honest ranks are 0 and 1, as in the reference
  const groups = t.map((x) => new PeerGroup(x, { runId: RUN, timeoutMs: 3000, members: MEMBERS }));
  const gs = honest(5);
  const t0 = Date.now();
  const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN, graceMs: opts.graceMs }));
  const heads = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 0)));
  const seen = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 1)));
  const plan = a(seen.map(f32.decode));
  const ctx = Insider.context(RUN, 0, 0, MEMBERS);
  const mine = (i: number) => f32.encode(Array.isArray(plan.to) ? plan.to[i] : plan.to);
  const myHead = (i: number) => evil.header(ctx, mine(i));
  ['p0', 'p1'].forEach((p, i) => {
    if (plan.withhold?.includes(p)) return;
    evil.send(p, FRAME.allGather, RUN, 0, 0, myHead(i));
    evil.send(p, FRAME.allGather, RUN, 0, 1, mine(i));
  });
  ['p0', 'p1'].forEach((p, i) => {
    if (plan.withholdEcho?.includes(p)) return;
    const got = [seen[0], seen[1], mine(i)];
    const slots = [Insider.slot(heads[0], seen[0]), Insider.slot(heads[1], seen[1]), Insider.slot(myHead(i), mine(i))];
    evil.send(p, FRAME.allGather, RUN, 0, 2, plan.echo ? plan.echo(got, p, slots) : Insider.row(slots));
  });
  const settled = await Promise.allSettled(runs);
  for (const x of settled) if (x.status === 'rejected') throw x.reason;
  const res = settled.map((x) => (x as PromiseFulfilledResult<Awaited<(typeof runs)[number]>>).value);
  return { res, ms: Date.now() - t0, ref: await reference(gs), gs };
}

const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer).equals(Buffer.from(b.buffer));

/** The 3-member run with an honest third member contributing `x`: what the honest members must end with when it is kept. */
async function withThird(gs: Float32Array[], x: Float32Array): Promise<Float32Array> {
  const { transports } = LoopbackHub.group(3);
  const groups = transports.map((t) => new PeerGroup(t, { runId: RUN, timeoutMs: 5000 }));
  return (await Promise.all(groups.map((g, r) => allReduceMean(g, [...gs, x][r], { mode: 'fp32', screen: DEFAULT_SCREEN }))))[0].out;
}

describe('an insider against the verifiable all-reduce (3 members, fp32, default screen)', () => {
  const cases: [string, Attack, RegExp, boolean][] = [
    ['−1000 × the true mean (a "poisoned reduced chunk")', (s) => ({ to: s[0].map((v, i) => -1000 * (v + s[1][i]) / 2) }), /norm .* above 4 × the others' median/, false],
    ['sign-flipped', (s) => ({ to: s[0].map((v, i) => -(v + s[1][i]) / 2) }), /cosine -?\d\.\d+ with the others' mean, below -0.2/, false],
    ['NaN', (s) => ({ to: s[0].map(() => NaN) }), /non-finite/, false],
    ['a different contribution, each signed, to each member', (s) => ({ to: [s[0], s[1].map((v) => -3 * v)] }), /signed two different contributions/, true],
  ];

  it.each(cases)('%s: left out on both honest members, named, the mean equals the run without it', async (_, a, why, fault) => {
    const { res, ref } = await attack(a);
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', fault]]);
      expect(r.excluded[0].why).toMatch(why);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  // Echo lies: a slot whose signature does not verify changes nothing (no honest member is framed,
  // in a group of 3 too); the liar is named by whoever received it. Its own contribution (a copy of
  // p0's gradient here, which passes the screen) is summed.
  const lies: [string, Plan['echo']][] = [
    ["one honest contribution's digest (the framing lie)", (got, _to, slots) => Insider.row([{ ...slots[0], digest: Insider.digest(got[1]) }, slots[1], slots[2]])],
    ['both honest contributions (swapped)', (_got, _to, slots) => Insider.row([{ ...slots[0], digest: slots[1].digest }, { ...slots[1], digest: slots[0].digest }, slots[2]])],
    ["another digest for p1's contribution with a forged signature, to p0 only", (got, to, slots) => Insider.row(to === 'p0' ? [slots[0], { ...slots[1], digest: Insider.digest(got[0]), sig: slots[1].sig.map((b) => b ^ 1) }, slots[2]] : slots)],
  ];
  it.each(lies)('an echo lying about %s: nobody is removed, the means are equal, the liar is named', async (_, echo) => {
    const { res, gs } = await attack((s) => ({ to: s[0], echo }));
    const want = await withThird(gs, gs[0]);
    for (const r of res) {
      expect(r.excluded).toEqual([]);
      expect(r.kept).toEqual([0, 1, 2]);
      expect(same(r.out, want)).toBe(true);
    }
    const named = res.flatMap((r) => r.notices);
    expect(named.length).toBeGreaterThan(0);
    for (const n of named) expect(n).toMatchObject({ peer: 'p2', why: expect.stringMatching(/does not verify/) });
  });

  it('a contribution withheld from one member: the other relays it after the grace, nobody stalls, the means are equal, the sender is named', async () => {
    const { res, gs, ms } = await attack((s) => ({ to: s[0], withhold: ['p0'] }), { graceMs: 300 });
    expect(ms).toBeLessThan(2500); // well inside the 3 s collective timeout
    const want = await withThird(gs, gs[0]);
    for (const r of res) {
      expect(r.excluded).toEqual([]);
      expect(same(r.out, want)).toBe(true);
    }
    expect(res[0].notices).toEqual([expect.objectContaining({ peer: 'p2', why: expect.stringMatching(/did not reach p0 whole and signed; p1 relayed it/) })]);
    expect(res[1].notices).toEqual([]);
  });

  it('an echo withheld from one member: it goes on after the grace with the rows it has', async () => {
    const { res, gs, ms } = await attack((s) => ({ to: s[0], withholdEcho: ['p0'] }), { graceMs: 300 });
    expect(ms).toBeLessThan(2500);
    const want = await withThird(gs, gs[0]);
    for (const r of res) {
      expect(r.excluded).toEqual([]);
      expect(same(r.out, want)).toBe(true);
    }
  });

  it('a contribution withheld from everyone: nobody vouches for it, so every honest member waits out the collective timeout (as for a silent member)', async () => {
    const t0 = Date.now();
    await expect(attack((s) => ({ to: s[0], withhold: ['p0', 'p1'] }))).rejects.toThrow(/timed out/);
    expect(Date.now() - t0).toBeLessThan(4000);
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

  it('INT8: a NaN scale sent to one member only (each signed): both name and fault the sender at once, nobody stalls', async () => {
    const hub = new LoopbackHub();
    const evil = new Insider(hub.endpoint('p2'));
    const groups = ['p0', 'p1'].map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, timeoutMs: 3000, members: MEMBERS }));
    const gs = honest(6);
    const t0 = Date.now();
    const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8', screen: DEFAULT_SCREEN }));
    const heads = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 0)));
    const seen = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 1)));
    const good = seen[1].slice();
    const bad = good.slice();
    new DataView(bad.buffer).setFloat32(0, NaN, true); // the first block's scale
    const ctx = Insider.context(RUN, 0, 0, MEMBERS);
    for (const [p, c] of [['p0', bad], ['p1', good]] as const) {
      const h = evil.header(ctx, c);
      evil.send(p, FRAME.allGather, RUN, 0, 0, h);
      evil.send(p, FRAME.allGather, RUN, 0, 1, c);
      evil.send(p, FRAME.allGather, RUN, 0, 2, Insider.row([Insider.slot(heads[0], seen[0]), Insider.slot(heads[1], seen[1]), Insider.slot(h, c)]));
    }
    const res = await Promise.all(runs);
    expect(Date.now() - t0).toBeLessThan(3000); // within one collective timeout
    const { transports } = LoopbackHub.group(2);
    const ref = (await Promise.all(transports.map((t, r) => allReduceMean(new PeerGroup(t, { runId: RUN }), gs[r], { mode: 'int8', screen: DEFAULT_SCREEN }))))[0].out;
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', true]]);
      expect(r.excluded[0].why).toMatch(/signed two different contributions/);
      expect(same(r.out, ref)).toBe(true);
    }
  });
});
