/**
 * An insider withholding its signed STATUS or REPORT from every member (issue 38: the membership
 * agreement's first round waited for every member, so one that sent nothing, while it kept
 * heartbeating, stalled the whole group until the collective timeout). Honest members: PeerGroup +
 * the member group's decision (agreeStatements, then agreedSyncVerdict / agreedReports); the
 * insider speaks raw frames written from the protocol (insider.ts). It receives every statement and
 * sends its echo rows, even with its own signed statement in its own slot (a relay by the sender
 * itself counts for nothing), but sends its statement to nobody.
 */
import { describe, expect, it } from 'vitest';
import { agreedReports, agreedSyncVerdict, agreeStatements } from '../../../src/parallel/dp/agreement';
import { Withholding } from '../../../src/parallel/dp/joins';
import { encodeReport, encodeStatus, type GroupStatus, type StepReport } from '../../../src/parallel/dp/wire';
import { PeerGroup } from '../../../src/peers/collectives/group';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { dp, FRAME, Insider } from './insider';

const FP = 0x5eed;
const EPOCH = 4;
const RUN = dp.runId('wh', EPOCH);
const STEP = 5;
const status = (members: string[]): GroupStatus => ({ fingerprint: FP, epoch: EPOCH, members, step: STEP, weightsHash: 7, established: true, stateDigest: new Uint8Array(32).fill(1) });
const report = (): StepReport => ({ step: STEP + 1, weightsHash: 7, loss: 2.5, joiners: [], accused: [] });

/** The insider's side at group step `step`: takes every honest statement, sends none; its echo rows carry them and its own. */
async function withholder(ev: Insider, members: string[], step: number, own: Uint8Array): Promise<void> {
  const honest = members.filter((p) => p !== ev.id);
  const got = await Promise.all(honest.map((p) => ev.recv(p, RUN, step, 0)));
  const row = Insider.echo(members.map((q) => (q === ev.id ? own : got[honest.indexOf(q)])));
  for (const p of honest) ev.send(p, FRAME.allGather, RUN, step, 1, row);
}

describe('an insider withholding its signed statement from every member', () => {
  for (const honest of [['p0', 'p1'], ['p0', 'p1', 'p2']]) {
    const members = [...honest, 'p3'];
    it(`its STATUS, ${members.length} members: the round goes on after a bounded wait, the insider absent alike on every honest member, the next group without it`, async () => {
      const hub = new LoopbackHub();
      const ev = new Insider(hub.endpoint('p3'));
      // The collective timeout is far beyond the bound: before, the round waited for it (and failed).
      const groups = honest.map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, members, timeoutMs: 30_000 }));
      const own = ev.statement('status', RUN, 0, members, dp.status(status(members)));
      const t0 = performance.now();
      const [res] = await Promise.all([Promise.all(groups.map(async (g) => {
        const a = await agreeStatements(g, encodeStatus(status(members)), { domain: 'status', graceMs: 200 });
        return { absent: a.absent, ...agreedSyncVerdict(g, a, FP, EPOCH, STEP) };
      })), withholder(ev, members, 0, own)]);
      const ms = performance.now() - t0;
      groups.forEach((g) => g.close());
      expect(ms).toBeLessThan(5000);
      for (const r of res) {
        expect(r).toEqual(res[0]);
        expect(r.absent).toEqual([members.length - 1]);
        expect(r.removed).toEqual([]);
        expect(r.verdict).toEqual({ agreedView: honest, why: expect.stringMatching(/no signed status of p3/) });
      }
    }, 10_000);
  }

  it('a member not heard from since the round began (still starting, say) is waited for: given up on only once it shows it is alive', async () => {
    const honest = ['p0', 'p1', 'p2'];
    const members = [...honest, 'p3'];
    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p3'));
    const groups = honest.map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, members, timeoutMs: 30_000 }));
    let p3Heard = -Infinity;
    setTimeout(() => (p3Heard = Date.now()), 1500); // its first heartbeat
    const own = ev.statement('status', RUN, 0, members, dp.status(status(members)));
    const t0 = performance.now();
    const [res] = await Promise.all([Promise.all(groups.map(async (g) => {
      const a = await agreeStatements(g, encodeStatus(status(members)), { domain: 'status', graceMs: 200, lastHeard: (p) => (p === 'p3' ? p3Heard : Date.now()) });
      return a.absent;
    })), withholder(ev, members, 0, own)]);
    const ms = performance.now() - t0;
    groups.forEach((g) => g.close());
    expect(ms).toBeGreaterThan(1500);
    expect(ms).toBeLessThan(5000);
    expect(res).toEqual(honest.map(() => [3]));
  }, 10_000);

  it('its REPORT, 4 members: the step ends after a bounded wait on every honest member alike, naming it', async () => {
    const honest = ['p0', 'p1', 'p2'];
    const members = [...honest, 'p3'];
    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p3'));
    const groups = honest.map((id) => new PeerGroup(hub.endpoint(id), { runId: RUN, members, timeoutMs: 30_000 }));
    groups.forEach((g) => g.setStep(1));
    const own = ev.statement('report', RUN, 1, members, dp.report(report()));
    const t0 = performance.now();
    const [res] = await Promise.all([Promise.all(groups.map(async (g) => {
      const a = await agreeStatements(g, encodeReport(report()), { domain: 'report', graceMs: 200 });
      try {
        agreedReports(g, a, STEP);
        return 'decided without it';
      } catch (e) {
        return (e as Error).message;
      }
    })), withholder(ev, members, 1, own)]);
    const ms = performance.now() - t0;
    groups.forEach((g) => g.close());
    expect(ms).toBeLessThan(5000);
    expect(res).toEqual(honest.map(() => `no signed report of p3 after step ${STEP}`));
  }, 10_000);

  it('withholding again and again: removed for the run at the third agreed absence, not before', () => {
    const w = new Withholding(3);
    expect(w.record(['p3'])).toEqual([]);
    expect(w.record(['p3'])).toEqual([]);
    expect(w.record(['p3'])).toEqual([['p3', 3]]);
  });
});
