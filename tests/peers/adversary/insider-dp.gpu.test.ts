/**
 * An insider against data-parallel training (two honest DataParallel members, micro on one Dawn
 * device, loopback): the insider (insider.ts, from the protocol description) joins with HELLO,
 * claims a forged "established" state one step ahead at every sync, commits to and reveals a huge
 * contribution, spams HELLO to force regroups, then NaN and −1000 × last step's mean until it is
 * removed, and asks to come back. The honest members must end bit-identical to a run of the two
 * of them alone: every contribution of the insider left out, its state never adopted. The same
 * two trainers then face an insider in a DiLoCo group (below).
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DataParallel, type DpEvent } from '../../../src/parallel/dp/dp';
import type { DpError } from '../../../src/parallel/dp/types';
import { DiLoCo } from '../../../src/parallel/diloco/diloco';
import { weightsHash } from '../../../src/parallel/dp/wire';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import type { Trainer } from '../../../src/engine/train/trainer';
import { microTrainerPool } from '../../helpers/trainer-pool';
import { dp, f32, FRAME, Insider } from './insider';

// One build of two micro trainers for both attacks (building compiles shaders: most of the file's time).
const { fresh } = microTrainerPool(2, 300_000);
const STEPS = 8;
const RUN = 'test';

const hashOf = async (t: Trainer) => weightsHash(await t.model.readFlat('weights'));

/** The honest contributions the insider last received (it commits before it sees this step's). */
let lastSeen: Float32Array[] | null = null;

/**
 * The insider's side of one training step of a group, commit then reveal: the honest commitments
 * (tag 0), its own commitment, its commitment row (tag 1), its contribution (tag 2), the honest
 * ones, its echo (tag 3), the relay round (tag 4: it relays nothing), the report (tag 5) and its echo (tag 6). It must
 * commit before it sees anything of this step, so it aims with what it saw last step.
 */
async function memberStep(ev: Insider, epoch: number, gstep: number, mine: (last: Float32Array[] | null) => Float32Array, before?: () => void): Promise<void> {
  const id = dp.runId(RUN, epoch);
  const commits = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 0)));
  if (before) return before();
  const c = f32.encode(mine(lastSeen));
  const cm = ev.commitment(Insider.context(id, gstep, 0, ['p0', 'p1', 'p2']), c);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 0, cm);
  const row = Insider.row([Insider.slot(commits[0]), Insider.slot(commits[1]), Insider.slot(cm)]);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 1, row);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 2, c);
  lastSeen = (await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 2)))).map(f32.decode);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 3, row);
  // The report, signed and echoed (tags 5 and 6): p0's step, hash and loss under its own signature.
  const reps = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 5)));
  const dv = new DataView(reps[0].buffer, reps[0].byteOffset);
  const report = ev.statement('report', id, gstep, ['p0', 'p1', 'p2'], dp.report({ step: dv.getUint32(8, true), weightsHash: dv.getUint32(13, true), loss: dv.getFloat32(17, true) }));
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 5, report);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 6, Insider.echo([...reps, report]));
}

/** Waits for p0's WELCOME (control channel) and returns its epoch; then the sync with a forged state ahead. */
async function joinWithForgedState(ev: Insider, fingerprint: number, step: number, stateBytes: number): Promise<number> {
  const w = await ev.recvControl('p0', RUN, 2); // WELCOME
  const epoch = new DataView(w.buffer, w.byteOffset).getUint32(12, true);
  const id = dp.runId(RUN, epoch);
  const members = ['p0', 'p1', 'p2'];
  // Signed (the sync's statuses are signed and echoed: tag 0, then the echo row at tag 1).
  const forged = ev.statement('status', id, 0, members, dp.status({ fingerprint, epoch, step: step + 1, weightsHash: 0x02020202, established: true, members, stateDigest: new Uint8Array(32).fill(2) }));
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 0, forged);
  const got = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, 0, 0)));
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 1, Insider.echo([...got, forged]));
  // Outvoted, it is handed the group's state (all-to-all rounds of 16 MiB, from tag 2): it takes part, sending nothing.
  for (let r = 0; r < Math.ceil(stateBytes / (16 << 20)); r++) {
    for (const p of ['p0', 'p1']) ev.send(p, FRAME.allToAll, id, 0, 2 + r, new Uint8Array(0));
    await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, 0, 2 + r)));
  }
  return epoch;
}

describe('an insider in a data-parallel group', () => {
  it('forged ahead-state, huge / NaN / −1000 × last-mean contributions (committed blind), HELLO spam: named, removed, the honest weights equal a run without it', async () => {
    // The run without the insider.
    let ts = fresh(2);
    const ref = LoopbackHub.group(2);
    const alone = ts.map((t, i) => new DataParallel(t, ref.transports[i], { run: RUN, mode: 'fp32', members: ['p0', 'p1'] }));
    let wantLoss: (number | null)[] = [];
    for (let s = 0; s < STEPS; s++) wantLoss = (await Promise.all(alone.map((d) => d.step()))).map((x) => x.loss);
    const want = await hashOf(ts[0]);
    alone.forEach((d) => d.stop());

    ts = fresh(2);
    const hub = new LoopbackHub();
    const ends = ['p0', 'p1'].map((id) => hub.endpoint(id));
    const ev = new Insider(hub.endpoint('p2'));
    const events: DpEvent[][] = [[], []];
    const dps = ts.map((t, i) => new DataParallel(t, ends[i], { run: RUN, mode: 'fp32', members: ['p0', 'p1'], silenceMs: 10_000, onEvent: (e) => events[i].push(e) }));
    const fp = dps[0].fingerprint;
    const stateBytes = 20 + 12 * ts[0].model.layout.totalFloats;
    const t0 = performance.now();

    const insider = (async () => {
      for (const p of ['p0', 'p1']) ev.control(p, RUN, dp.hello(fp));
      const e1 = await joinWithForgedState(ev, fp, 1, stateBytes); // admitted after step 0
      const n = ts[0].model.layout.totalFloats;
      await memberStep(ev, e1, 1, () => new Float32Array(n).fill(1000)); // step 1: a huge vector (nothing of this step seen)
      // Step 2: twenty HELLOs while the members wait on its contribution: one regroup, the rest ignored.
      await memberStep(ev, e1, 2, () => new Float32Array(0), () => {
        for (let k = 0; k < 20; k++) for (const p of ['p0', 'p1']) ev.control(p, RUN, dp.hello(fp));
      });
      const e2 = await joinWithForgedState(ev, fp, 3, stateBytes); // re-admitted after step 2
      await memberStep(ev, e2, 1, () => new Float32Array(n).fill(NaN)); // step 3
      await memberStep(ev, e2, 2, (s) => s![0].map((v, i) => (-1000 * (v + s![1][i])) / 2)); // step 4: −1000 × last step's mean → third strike
      for (const p of ['p0', 'p1']) ev.control(p, RUN, dp.hello(fp)); // asks to come back
    })();
    let lastLoss: (number | null)[] = [];
    for (let s = 0; s < STEPS; s++) lastLoss = (await Promise.all(dps.map((d) => d.step()))).map((x) => x.loss);
    await insider;
    const ms = performance.now() - t0;

    const hashes = await Promise.all(ts.map(hashOf));
    expect(hashes).toEqual([want, want]);
    // The honest loss is not merely within noise of the run without the insider: it is that run's.
    expect(lastLoss).toEqual(wantLoss);
    for (const ev of events) {
      const kinds = (k: string) => ev.filter((e) => e.kind === k);
      expect(kinds('outvoted').map((e) => e.peers)).toEqual([['p2'], ['p2']]);
      expect(kinds('screened').map((e) => [e.step, e.peers[0]])).toEqual([[1, 'p2'], [3, 'p2'], [4, 'p2']]);
      expect(kinds('screened').map((e) => e.message).join('\n')).toMatch(/norm [\s\S]*non-finite[\s\S]*norm /);
      expect(kinds('removed').map((e) => e.peers)).toEqual([['p2']]);
      expect(kinds('removed')[0].message).toMatch(/screened out 3 steps in a row/);
      expect(kinds('reject').filter((e) => /hello again within/.test(e.message)).length).toBeGreaterThanOrEqual(19);
      expect(kinds('reject').some((e) => /hello from a removed member/.test(e.message))).toBe(true);
      expect(kinds('state-received')).toEqual([]);
    }
    expect(dps.map((d) => d.currentMembers)).toEqual([['p0', 'p1'], ['p0', 'p1']]);
    expect(ms).toBeLessThan(60_000);
    dps.forEach((d) => d.stop());
  }, 120_000);
});

/**
 * A group of two starting together with no majority for one state (issue 38: an insider claiming
 * step 35 with every weight 0.05 set the start, loss 4.17 against 3.43). The furthest claim is
 * offered, and each receiver adopts it only if its held-out loss is not above its own: a member
 * resumed from trained steps refuses the insider's and stops with its weights as they were; a fresh
 * member adopts a resumed one's, whose loss is lower. The insider is a real member with a forged
 * state: what it claims, not how it talks, is the attack here.
 */
describe('a starting state no majority vouches for', () => {
  const K = 4;
  it('a trained member refuses an insider\'s "step 35, every weight 0.05" and keeps its weights; a fresh member adopts a resumed member\'s state', async () => {
    let [a, b] = fresh(2);
    for (let s = 0; s < K; s++) await a.trainStep();
    const trained = await a.trainingState();
    const trainedHash = weightsHash(trained.weights);

    [a, b] = fresh(2);
    a.restoreTrainingState(trained);
    const n = trained.weights.length;
    b.restoreTrainingState({ weights: new Float32Array(n).fill(0.05), m: new Float32Array(n), v: new Float32Array(n), step: 35 });
    let hub = LoopbackHub.group(2);
    const events: DpEvent[] = [];
    const honest = new DataParallel(a, hub.transports[0], { run: 'start', mode: 'fp32', members: ['p0', 'p1'], onEvent: (e) => events.push(e) });
    const insider = new DataParallel(b, hub.transports[1], { run: 'start', mode: 'fp32', members: ['p0', 'p1'] });
    const other = insider.step().catch((e: unknown) => e);
    const refusal = await honest.step().then(() => null, (e: unknown) => e as DpError);
    expect(refusal).toMatchObject({ name: 'DpError', code: 'state-rejected', peers: ['p1'] });
    expect(refusal!.message).toMatch(/state of step 35 that p1 claims, which no majority vouched for, refused on the held-out batches: its held-out loss (\d\.\d+) is above this peer's own (\d\.\d+)/);
    const [, claimed, own] = refusal!.message.match(/loss (\d\.\d+) is above this peer's own (\d\.\d+)/)!.map(Number);
    expect(claimed).toBeGreaterThan(own * 1.01);
    expect(events.filter((e) => e.kind === 'state-rejected').map((e) => e.peers)).toEqual([['p1']]);
    expect(events.filter((e) => e.kind === 'state-received')).toEqual([]);
    // Nothing adopted: its weights, moments and step are the trained ones, bit for bit.
    expect(await hashOf(a)).toBe(trainedHash);
    const kept = await a.trainingState();
    expect([kept.step, weightsHash(kept.m), weightsHash(kept.v)]).toEqual([K, weightsHash(trained.m), weightsHash(trained.v)]);
    insider.stop();
    await other;

    // A member resumed from the same trained steps and a fresh one: the fresh one adopts (lower loss).
    [a, b] = fresh(2);
    a.restoreTrainingState(trained);
    hub = LoopbackHub.group(2);
    const got: DpEvent[] = [];
    const pair = [a, b].map((t, i) => new DataParallel(t, hub.transports[i], { run: 'start', mode: 'fp32', members: ['p0', 'p1'], onEvent: i === 1 ? (e) => got.push(e) : undefined }));
    await Promise.all(pair.map((d) => d.step()));
    const received = got.filter((e) => e.kind === 'state-received');
    expect(received.map((e) => e.peers)).toEqual([['p0']]);
    expect(received[0].message).toMatch(/state of step 4 from p0 \(no majority vouched for it: held-out loss (\d\.\d+), this peer's own (\d\.\d+), on the held-out batches\)/);
    const [, theirs, mine] = received[0].message.match(/held-out loss (\d\.\d+), this peer's own (\d\.\d+)/)!.map(Number);
    expect(theirs).toBeLessThan(mine);
    expect([a.stepIndex, b.stepIndex]).toEqual([K + 1, K + 1]);
    expect(await hashOf(b)).toBe(await hashOf(a));
    pair.forEach((d) => d.stop());
  }, 120_000);
});

/**
 * An insider in a DiLoCo group (issue 38: a ×−1000 pseudo-gradient took the loss from 3.49 to 981
 * after one outer step, nobody named). Two honest DiLoCo members (micro on one Dawn device,
 * loopback, fp32 wire, H = 2) start together with an insider (insider.ts, from the protocol
 * description): it copies an honest STATUS at the sync, then at each outer step commits blind and
 * reveals a huge Δ, −1000 × the honest mean Δ it saw last, then NaN. Every one is screened and
 * named, the third removes it, and the honest members end with θ_global and loss bit-identical to
 * a run of the two of them alone.
 */
const DL_RUN = 'dl-insider';
const H = 2;
const OUTER = 4;
const live: DiLoCo[] = [];
afterAll(() => live.forEach((d) => (d.stop('test done'), d.destroy())));

let dlLastSeen: Float32Array[] | null = null;

/** One outer exchange, commit then reveal (tags 0 commitment, 1 row, 2 the Δ, 3 echo, 4 relays), then the report (tag 5, its echo 6) copied from p0's. */
async function outerStep(ev: Insider, gstep: number, mine: (last: Float32Array[] | null) => Float32Array): Promise<void> {
  const id = dp.runId(DL_RUN, 1);
  const commits = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 0, 120_000)));
  const c = f32.encode(mine(dlLastSeen));
  const cm = ev.commitment(Insider.context(id, gstep, 0, ['p0', 'p1', 'p2']), c);
  const row = Insider.row([Insider.slot(commits[0]), Insider.slot(commits[1]), Insider.slot(cm)]);
  for (const p of ['p0', 'p1']) {
    ev.send(p, FRAME.allGather, id, gstep, 0, cm);
    ev.send(p, FRAME.allGather, id, gstep, 1, row);
    ev.send(p, FRAME.allGather, id, gstep, 2, c);
  }
  dlLastSeen = (await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 2)))).map(f32.decode);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 3, row);
  const reps = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 5)));
  const rep = ev.statement('report', id, gstep, ['p0', 'p1', 'p2'], reps[0].subarray(0, reps[0].length - 96));
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 5, rep);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 6, Insider.echo([...reps, rep]));
}

describe('an insider in a DiLoCo group', () => {
  it('huge, −1000 × last mean and NaN pseudo-gradients (committed blind): screened, named, removed; θ_global and loss equal the honest pair alone', async () => {
    const opts = { run: DL_RUN, mode: 'fp32' as const, silenceMs: 30_000, diloco: { innerSteps: H, wire: 'fp32' as const } };
    // The pair alone.
    let ts: Trainer[] = fresh(2);
    const ref = LoopbackHub.group(2);
    const alone = ts.map((t, i) => new DiLoCo(t, ref.transports[i], { ...opts, members: ['p0', 'p1'] }));
    live.push(...alone);
    let wantLoss: (number | null)[] = [];
    for (let s = 0; s < OUTER * H; s++) wantLoss = (await Promise.all(alone.map((d) => d.step()))).map((x) => x.loss);
    const want = await alone[0].outerHash();
    alone.forEach((d) => d.stop('reference done'));

    ts = fresh(2);
    const hub = new LoopbackHub();
    const ev = new Insider(hub.endpoint('p2'));
    const events: DpEvent[][] = [[], []];
    const ds = ts.map((t, i) => new DiLoCo(t, hub.endpoint(`p${i}`), { ...opts, members: ['p0', 'p1', 'p2'], onEvent: (e) => events[i].push(e) }));
    live.push(...ds);
    const n = ts[0].model.layout.totalFloats; // the run's model, which an insider builds too
    const insider = (async () => {
      // The sync (group step 0, tag 0, echo at tag 1): p0's status signed as its own, so it is handed nothing.
      const id = dp.runId(DL_RUN, 1);
      const got = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, 0, 0, 120_000)));
      const st = ev.statement('status', id, 0, ['p0', 'p1', 'p2'], got[0].subarray(0, got[0].length - 96));
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 0, st);
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 1, Insider.echo([...got, st]));
      await outerStep(ev, 1, () => new Float32Array(n).fill(1000));
      await outerStep(ev, 2, (s) => s![0].map((v, i) => (-1000 * (v + s![1][i])) / 2));
      await outerStep(ev, 3, () => new Float32Array(n).fill(NaN));
    })();
    let lastLoss: (number | null)[] = [];
    for (let s = 0; s < OUTER * H; s++) lastLoss = (await Promise.all(ds.map((d) => d.step()))).map((x) => x.loss);
    expect(await Promise.all(ds.map((d) => d.outerHash()))).toEqual([want, want]);
    expect(lastLoss).toEqual(wantLoss);
    await insider;
    for (const e of events) {
      const kinds = (k: string) => e.filter((x) => x.kind === k);
      expect(kinds('screened').map((x) => x.peers[0])).toEqual(['p2', 'p2', 'p2']);
      expect(kinds('screened').map((x) => x.message).join('\n')).toMatch(/norm [\s\S]*(norm|undoes|cosine)[\s\S]*non-finite/);
      expect(kinds('removed').map((x) => x.peers)).toEqual([['p2']]);
    }
    expect(ds.map((d) => d.dp.currentMembers)).toEqual([['p0', 'p1'], ['p0', 'p1']]);
  }, 300_000);
});
