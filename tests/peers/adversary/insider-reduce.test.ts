/**
 * An insider against the verifiable all-reduce: two honest members (PeerGroup + allReduceMean with
 * the data-parallel screen) and one insider speaking raw frames (insider.ts). Commit then reveal
 * keeps the honest contributions from it until it has committed; the test hands it them anyway
 * (an oracle), so the screen faces an insider that aims at them.
 */
import { describe, expect, it } from 'vitest';
import { allReduceMean } from '../../../src/peers/collectives/allreduce';
import { DEFAULT_SCREEN } from '../../../src/peers/collectives/screen';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { Rng } from '../../../src/engine/util/rng';
import { encodeInt8Chunk } from '../../../src/peers/collectives/chunk-codec';
import { f32, FRAME, Insider } from './insider';

const RUN = 7;
const n = 3000;

/** Honest gradients of one direction plus per-member noise (cosine ≈ 0.6 between members). */
function honest(seed: number, k = 2): Float32Array[] {
  const base = new Rng(seed).normalArray(n, 1);
  return Array.from({ length: k }, (_, i) => i + 1).map((k) => {
    const noise = new Rng(seed * 10 + k).normalArray(n, 0.8);
    return base.map((v, i) => v + noise[i]);
  });
}

/** The 2-member run without the insider: what the honest members must end with when it is left out. */
async function reference(gs: Float32Array[]): Promise<Float32Array> {
  const { transports } = LoopbackHub.group(gs.length);
  const groups = transports.map((t) => new PeerGroup(t, { runId: RUN, timeoutMs: 5000 }));
  return (await Promise.all(groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN }))))[0].out;
}

/**
 * One exchange, commit then reveal (tags: 0 commitment, 1 commitment row, 2 contribution, 3 echo,
 * 4 relays). The honest members reveal nothing before every commitment is in, so the insider must
 * commit blind; the attacks get the honest gradients from the test instead (an oracle: a stronger
 * insider than the protocol allows). `to` is what it commits to for each honest member, `reveal`
 * what it then sends (default: what it committed to), `echo` what it echoes to each, `withhold`
 * the members it reveals nothing to.
 */
type Plan = {
  to: Float32Array[] | Float32Array;
  reveal?: Float32Array[] | Float32Array;
  echo?: (got: Uint8Array[], to: string, slots: ReturnType<typeof Insider.slot>[]) => Uint8Array;
  withhold?: string[];
  withholdEcho?: string[];
};
type Attack = (honest: Float32Array[]) => Plan;

const MEMBERS = ['p0', 'p1', 'p2'];

/** `k` honest members p0..p{k−1} and the insider p{k} (it sorts last: the honest ranks are as in the reference). */
async function attack(a: Attack, opts: { graceMs?: number; k?: number } = {}) {
  const k = opts.k ?? 2;
  const HONEST = Array.from({ length: k }, (_, i) => `p${i}`);
  const MEMBERS = [...HONEST, `p${k}`];
  const hub = new LoopbackHub();
  const t = HONEST.map((id) => hub.endpoint(id));
  const evil = new Insider(hub.endpoint(`p${k}`));
  const groups = t.map((x) => new PeerGroup(x, { runId: RUN, timeoutMs: 3000, members: MEMBERS }));
  const gs = honest(5, k);
  const t0 = Date.now();
  const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'fp32', screen: DEFAULT_SCREEN, graceMs: opts.graceMs }));
  const commits = await Promise.all(HONEST.map((p) => evil.recv(p, RUN, 0, 0)));
  // It waits to see a contribution before committing: none comes.
  await new Promise((r) => setTimeout(r, 200));
  const peeked = HONEST.some((p) => [1, 2].some((tag) => evil.has(p, RUN, 0, tag)));
  const plan = a(gs);
  const ctx = Insider.context(RUN, 0, 0, MEMBERS);
  const pick = (v: Float32Array[] | Float32Array, i: number) => f32.encode(Array.isArray(v) ? v[i] : v);
  const mine = (i: number) => pick(plan.to, i);
  const revealed = (i: number) => pick(plan.reveal ?? plan.to, i);
  const myCommit = (i: number) => evil.commitment(ctx, mine(i));
  HONEST.forEach((p, i) => evil.send(p, FRAME.allGather, RUN, 0, 0, myCommit(i)));
  const seen = await Promise.all(HONEST.map((p) => evil.recv(p, RUN, 0, 2)));
  const slotsFor = (i: number) => [...commits.map((c) => Insider.slot(c)), Insider.slot(myCommit(i))];
  HONEST.forEach((p, i) => {
    evil.send(p, FRAME.allGather, RUN, 0, 1, Insider.row(slotsFor(i)));
    if (!plan.withhold?.includes(p)) evil.send(p, FRAME.allGather, RUN, 0, 2, revealed(i));
  });
  HONEST.forEach((p, i) => {
    if (plan.withholdEcho?.includes(p)) return;
    const got = [...seen, mine(i)];
    evil.send(p, FRAME.allGather, RUN, 0, 3, plan.echo ? plan.echo(got, p, slotsFor(i)) : Insider.row(slotsFor(i)));
  });
  const settled = await Promise.allSettled(runs);
  for (const x of settled) if (x.status === 'rejected') throw x.reason;
  const res = settled.map((x) => (x as PromiseFulfilledResult<Awaited<(typeof runs)[number]>>).value);
  return { res, ms: Date.now() - t0, ref: await reference(gs), gs, peeked };
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
    ['−1000 × the true mean (a "poisoned reduced chunk")', (s) => ({ to: s[0].map((v, i) => -1000 * (v + s[1][i]) / 2) }), /norm/, false],
    ['sign-flipped and 5 × the mean (it would reverse the step)', (s) => ({ to: s[0].map((v, i) => (-5 * (v + s[1][i])) / 2) }), /cosine|undoes/, false],
    ['NaN', (s) => ({ to: s[0].map(() => NaN) }), /non-finite/, false],
    ['a different contribution, each signed, to each member', (s) => ({ to: [s[0], s[1].map((v) => -3 * v)] }), /signed two different contributions/, true],
  ];

  it.each(cases)('%s: left out on both honest members, named, the mean equals the run without it', async (_, a, why, fault) => {
    const { res, ref, peeked } = await attack(a);
    expect(peeked).toBe(false); // nothing was revealed to it before it committed
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', fault]]);
      expect(r.excluded[0].why).toMatch(why);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  it.each(cases.slice(0, 3))('a group of 4 (three honest): %s is left out on all three, the mean equals the three alone', async (_, a, why, fault) => {
    const { res, ref } = await attack(a, { k: 3 });
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p3', fault]]);
      expect(r.excluded[0].why).toMatch(why);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  it('sign-flipped at the honest scale: as far from each honest member as honest members may be from each other, so it is summed, and cannot reverse the mean', async () => {
    const { res, ref } = await attack((s) => ({ to: s[0].map((v, i) => -(v + s[1][i]) / 2) }));
    const dot = (a: Float32Array, b: Float32Array) => a.reduce((acc, v, i) => acc + v * b[i], 0);
    for (const r of res) {
      expect(r.excluded).toEqual([]);
      expect(dot(r.out, ref)).toBeGreaterThan(0); // (a + b)/6: the honest direction, a third of the step
    }
    expect(same(res[0].out, res[1].out)).toBe(true);
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

  it('a contribution withheld from everyone: nobody holds it, so after the last-sender grace it is left out on both (a strike, not proof), the means equal the run without it', async () => {
    const { res, ref, ms } = await attack((s) => ({ to: s[0], withhold: ['p0', 'p1'] }), { graceMs: 300 });
    expect(ms).toBeLessThan(2500); // no collective timeout (3 s) waited out
    for (const r of res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', false]]);
      expect(r.excluded[0].why).toMatch(/no member holds its contribution/);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  it('a reveal that does not match its commitment, to everyone: left out on both, named; to one member: the other relays the committed one', async () => {
    const all = await attack((s) => ({ to: s[0], reveal: s[1] }), { graceMs: 300 });
    for (const r of all.res) {
      expect(r.excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', false]]);
      expect(same(r.out, all.ref)).toBe(true);
      expect(r.notices).toEqual([expect.objectContaining({ peer: 'p2', why: expect.stringMatching(/reveal does not match its commitment/) })]);
    }
    const one = await attack((s) => ({ to: s[0], reveal: [s[1], s[0]] }), { graceMs: 300 });
    const want = await withThird(one.gs, one.gs[0]);
    for (const r of one.res) {
      expect(r.excluded).toEqual([]);
      expect(same(r.out, want)).toBe(true);
    }
    expect(one.res[0].notices.map((x) => x.why).join('\n')).toMatch(/reveal does not match[\s\S]*p1 relayed it/);
  });

  it('framing: a contribution aimed at the honest members\' statistics (−2 × their sum, which the old "cosine with the others\' mean" screen turned against both) leaves out only the insider', async () => {
    const { res, ref } = await attack((s) => ({ to: s[0].map((v, i) => -2 * (v + s[1][i])) }));
    for (const r of res) {
      expect(r.excluded.map((e) => e.peer)).toEqual(['p2']);
      expect(r.kept).toEqual([0, 1]);
      expect(same(r.out, ref)).toBe(true);
    }
  });

  it('noise within the screen is summed; the mean stays within the stated tolerance (normK · the larger honest norm + |ref|)/3', async () => {
    const { res, ref, gs } = await attack((s) => ({ to: new Rng(9).normalArray(n, 1.5).map((v, i) => v + (s[0][i] + s[1][i]) / 2) }));
    const norm = (x: ArrayLike<number>) => Math.sqrt(Array.from(x).reduce((a, v) => a + v * v, 0));
    const most = Math.max(norm(gs[0]), norm(gs[1])); // it passes while one honest member does not object: |x| ≤ normK · the larger
    expect(same(res[0].out, res[1].out)).toBe(true);
    expect(res[0].excluded).toEqual([]);
    const diff = norm(res[0].out.map((v, i) => v - ref[i]));
    expect(diff).toBeGreaterThan(0);
    expect(diff).toBeLessThanOrEqual((DEFAULT_SCREEN.normK * most + norm(ref)) / 3);
  });

  it('INT8: a NaN scale sent to one member only (each signed): both name and fault the sender at once, nobody stalls', async () => {
    const hub = new LoopbackHub();
    const evil = new Insider(hub.endpoint('p2'));
    const groups = ['p0', 'p1'].map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, timeoutMs: 3000, members: MEMBERS }));
    const gs = honest(6);
    const t0 = Date.now();
    const runs = groups.map((g, r) => allReduceMean(g, gs[r], { mode: 'int8', screen: DEFAULT_SCREEN }));
    const commits = await Promise.all(['p0', 'p1'].map((p) => evil.recv(p, RUN, 0, 0)));
    const good = encodeInt8Chunk(gs[1]); // an oracle: p1's own bytes
    const bad = good.slice();
    new DataView(bad.buffer).setFloat32(0, NaN, true); // the first block's scale
    const ctx = Insider.context(RUN, 0, 0, MEMBERS);
    const mine = { p0: bad, p1: good };
    for (const [p, c] of Object.entries(mine)) evil.send(p, FRAME.allGather, RUN, 0, 0, evil.commitment(ctx, c));
    for (const [p, c] of Object.entries(mine)) {
      const slots = [Insider.slot(commits[0]), Insider.slot(commits[1]), Insider.slot(evil.commitment(ctx, c))];
      evil.send(p, FRAME.allGather, RUN, 0, 1, Insider.row(slots));
      evil.send(p, FRAME.allGather, RUN, 0, 2, c);
      evil.send(p, FRAME.allGather, RUN, 0, 3, Insider.row(slots));
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
