/**
 * An insider equivocating at a sync (issue 38: membership and the start were decided from unsigned
 * STATUSes, so an insider telling members different things split a vote that sat at the majority).
 * Three honest members (PeerGroup + the member group's sync decision: agreeStatements, then
 * agreedSyncVerdict) and an insider speaking raw frames (insider.ts: signed statements and echo rows
 * from the protocol description). Whatever the insider signs, the honest members decide alike; two
 * signatures of it over different statuses are proof, and all three remove it.
 */
import { describe, expect, it } from 'vitest';
import { type AgreedSync, agreedReports, agreedSyncVerdict, agreeStatements } from '../../../src/parallel/dp/agreement';
import { admitByMajority } from '../../../src/parallel/dp/joins';
import { syncVerdict } from '../../../src/parallel/dp/sync';
import { encodeReport, encodeStatus, type GroupStatus, type StepReport } from '../../../src/parallel/dp/wire';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { dp, FRAME, Insider } from './insider';

const FP = 0x5eed;
const EPOCH = 4;
const RUN = dp.runId('eq', EPOCH);
const HONEST = ['p0', 'p1', 'p2'];
const MEMBERS = [...HONEST, 'p3'];
const STEP = 5;

const digest = (x: number) => new Uint8Array(32).fill(x);
const status = (o: Partial<GroupStatus>): GroupStatus => ({ fingerprint: FP, epoch: EPOCH, members: MEMBERS, step: STEP, weightsHash: 7, established: true, stateDigest: digest(1), ...o });

/** The insider's side: its signed status per honest member (null: withheld), then its echo row to each. */
async function insiderSync(ev: Insider, runId: number, members: string[], mine: Record<string, GroupStatus | null>): Promise<void> {
  const honest = members.filter((p) => p !== ev.id);
  const got = await Promise.all(honest.map((p) => ev.recv(p, runId, 0, 0)));
  const signed = Object.fromEntries(honest.map((p) => [p, mine[p] ? ev.statement('status', runId, 0, members, dp.status(mine[p]!)) : null]));
  for (const p of honest) if (signed[p]) ev.send(p, FRAME.allGather, runId, 0, 0, signed[p]!);
  // Its echo: the honest statements as received, and for itself whatever it told that member.
  for (const p of honest) ev.send(p, FRAME.allGather, runId, 0, 1, Insider.echo(members.map((q) => (q === ev.id ? signed[p] : got[honest.indexOf(q)]))));
}

const ends = new WeakMap<LoopbackHub, Map<string, ReturnType<LoopbackHub['endpoint']>>>();
/** The hub's endpoint for `id` (one per id and hub: a regroup reuses the transport). */
function endpoint(hub: LoopbackHub, id: string) {
  const m = ends.get(hub) ?? new Map();
  ends.set(hub, m);
  if (!m.has(id)) m.set(id, hub.endpoint(id));
  return m.get(id)!;
}

async function sync(hub: LoopbackHub, runId: number, members: string[], honest: Record<string, GroupStatus>, epoch = EPOCH) {
  const groups = Object.keys(honest).map((id) => new PeerGroup(endpoint(hub, id), { runId, members, timeoutMs: 10_000 }));
  try {
    return await Promise.all(groups.map(async (g) => {
      const a = await agreeStatements(g, encodeStatus(honest[g.transport.id]), { domain: 'status', graceMs: 200 });
      try {
        return agreedSyncVerdict(g, a, FP, epoch, STEP);
      } catch (e) {
        return { error: (e as Error).message };
      }
    }));
  } finally {
    groups.forEach((g) => g.close());
  }
}

/** What each honest member decided before (unsigned statuses, each its own copy of the insider's). */
function unsigned(members: string[], honest: GroupStatus[], toEach: GroupStatus[]) {
  const g = { members, size: members.length } as unknown as PeerGroup;
  return toEach.map((mine) => {
    try {
      return syncVerdict(g, [...honest, mine], FP, EPOCH, STEP);
    } catch (e) {
      return { error: (e as Error).message };
    }
  });
}

describe('an insider equivocating its STATUS at a sync', () => {
  it('a state vote at the exact majority: before, one honest member adopted and two stopped; now all three remove the insider, agree on the next group and its state', async () => {
    // p0 and p1 hold state 1, p2 another (it resumed elsewhere): whether state 1 has a strict
    // majority of four is the insider's call, and it tells p0 yes and p1, p2 no.
    const honest = { p0: status({}), p1: status({}), p2: status({ stateDigest: digest(2), weightsHash: 8 }) };
    const yes = status({});
    const no = status({ step: STEP + 1, stateDigest: digest(3), weightsHash: 9 });
    const before = unsigned(MEMBERS, Object.values(honest), [yes, no, no]);
    expect(before[0]).toEqual({ src: 0, needy: [2], outvoted: ['p2'] });
    expect(before[1]).toMatchObject({ error: expect.stringMatching(/no majority/) });

    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p3'));
    const [res] = await Promise.all([sync(hub, RUN, MEMBERS, honest), insiderSync(ev, RUN, MEMBERS, { p0: yes, p1: no, p2: no })]);
    for (const r of res) {
      expect(r).toEqual(res[0]);
      expect(r).toMatchObject({
        removed: [['p3', expect.stringMatching(/signed two different statuses/)]],
        verdict: { agreedView: ['p0', 'p1', 'p2'], why: expect.stringMatching(/p3 signed two different statuses/) },
      });
    }
    // The three regroup without it (its HELLO is refused for the run: MemberGuard.ban): state 1 has
    // a strict majority, p2 is handed it; the same verdict on every member.
    const next = dp.runId('eq', EPOCH + 1);
    const three = await sync(hub, next, HONEST, { p0: status({ epoch: EPOCH + 1, members: HONEST }), p1: status({ epoch: EPOCH + 1, members: HONEST }), p2: status({ epoch: EPOCH + 1, members: HONEST, stateDigest: digest(2), weightsHash: 8 }) }, EPOCH + 1);
    for (const r of three) expect(r).toEqual({ verdict: { src: 0, needy: [2], outvoted: ['p2'] }, removed: [], suspects: [] });
  }, 20_000);

  it('member lists: telling p0 the group and p1, p2 a group without p2: before, p0 went on and the others regrouped; now the insider is removed by all', async () => {
    const honest = { p0: status({}), p1: status({}), p2: status({}) };
    const all = status({});
    const without = status({ members: ['p0', 'p1', 'p3'] });
    const before = unsigned(MEMBERS, Object.values(honest), [all, without, without]);
    expect(before[0]).toEqual({ src: 0, needy: [], outvoted: [] });
    expect(before[1]).toMatchObject({ agreedView: MEMBERS });

    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p3'));
    const [res] = await Promise.all([sync(hub, RUN, MEMBERS, honest), insiderSync(ev, RUN, MEMBERS, { p0: all, p1: without, p2: without })]);
    for (const r of res) expect(r).toEqual(res[0]);
    expect(res[0]).toMatchObject({ removed: [['p3', expect.any(String)]], verdict: { agreedView: ['p0', 'p1', 'p2'] } });
  }, 20_000);

  it('a status withheld from one member, a forged relay, an honest insider: nobody removed, the verdict of the statuses themselves', async () => {
    const honest = { p0: status({}), p1: status({}), p2: status({ stateDigest: digest(2), weightsHash: 8 }) };
    const mine = status({});
    // Withheld from p2: it has it from p0's and p1's echoes, the same verdict, nobody removed.
    let hub = new LoopbackHub();
    let ev = new Insider(hub.endpoint('p3'));
    const t0 = performance.now();
    let [res] = await Promise.all([sync(hub, RUN, MEMBERS, honest), insiderSync(ev, RUN, MEMBERS, { p0: mine, p1: mine, p2: null })]);
    expect(performance.now() - t0).toBeLessThan(5000);
    for (const r of res) expect(r).toEqual({ verdict: { src: 0, needy: [2], outvoted: ['p2'] }, removed: [], suspects: [] });

    // Its echo relays a status "of p0" it signed itself: it does not verify, p3 is named to each
    // member it lied to, nobody removed, the verdict unchanged.
    hub = new LoopbackHub();
    ev = new Insider(hub.endpoint('p3'));
    const insider = (async () => {
      const got = await Promise.all(HONEST.map((p) => ev.recv(p, RUN, 0, 0)));
      const own = ev.statement('status', RUN, 0, MEMBERS, dp.status(mine));
      const fake = ev.statement('status', RUN, 0, MEMBERS, dp.status(status({ step: 99 })));
      for (const p of HONEST) ev.send(p, FRAME.allGather, RUN, 0, 0, own);
      for (const p of HONEST) ev.send(p, FRAME.allGather, RUN, 0, 1, Insider.echo([fake, got[1], got[2], own]));
    })();
    [res] = await Promise.all([sync(hub, RUN, MEMBERS, honest), insider]);
    for (const r of res as AgreedSync[]) {
      expect(r.verdict).toEqual({ src: 0, needy: [2], outvoted: ['p2'] });
      expect(r.removed).toEqual([]);
    }
    expect((res[1] as AgreedSync).suspects).toEqual([['p3', expect.stringMatching(/does not verify/)]]);
  }, 20_000);
});

describe('an insider equivocating its end-of-step REPORT', () => {
  it('a joiner listed to p0 and left out to p1, p2 (an admission at the exact majority of four): before, p0 admitted it and the others did not; now all three remove the insider and decide alike', async () => {
    // p0 and p1 reach joiner j, p2 does not yet: j's admission is the insider's call.
    const rep = (joiners: string[]): StepReport => ({ step: STEP + 1, weightsHash: 7, loss: 2.5, joiners, accused: [] });
    const honest = { p0: rep(['j']), p1: rep(['j']), p2: rep([]) };
    const before = [rep(['j']), rep([]), rep([])].map((mine) => admitByMajority(MEMBERS, [...Object.values(honest).map((r) => r.joiners), mine.joiners]).admitted);
    expect(before).toEqual([['j'], [], []]);

    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p3'));
    const groups = HONEST.map((id) => new PeerGroup(endpoint(hub, id), { runId: RUN, members: MEMBERS, timeoutMs: 10_000 }));
    groups.forEach((g) => g.setStep(1));
    const insider = (async () => {
      const got = await Promise.all(HONEST.map((p) => ev.recv(p, RUN, 1, 0)));
      const to = (joiners: string[]) => ev.statement('report', RUN, 1, MEMBERS, dp.report({ ...rep(joiners) }));
      const signed = { p0: to(['j']), p1: to([]), p2: to([]) } as Record<string, Uint8Array>;
      for (const p of HONEST) ev.send(p, FRAME.allGather, RUN, 1, 0, signed[p]);
      for (const p of HONEST) ev.send(p, FRAME.allGather, RUN, 1, 1, Insider.echo([...got, signed[p]]));
    })();
    const [res] = await Promise.all([Promise.all(groups.map(async (g, r) => {
      const a = await agreeStatements(g, encodeReport(honest[HONEST[r] as keyof typeof honest]), { domain: 'report', graceMs: 200 });
      return agreedReports(g, a, STEP);
    })), insider]);
    groups.forEach((g) => g.close());
    for (const r of res) {
      expect(r).toEqual(res[0]);
      expect(r.removed).toEqual([['p3', expect.stringMatching(/signed two different reports/)]]);
      expect(r.reports[3]).toBeNull();
    }
  }, 20_000);
});
