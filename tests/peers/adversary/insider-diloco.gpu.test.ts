/**
 * An insider in a DiLoCo group (issue 38: a ×−1000 pseudo-gradient took the loss from 3.49 to 981
 * after one outer step, nobody named). Two honest DiLoCo members (micro on one Dawn device,
 * loopback, fp32 wire, H = 2) start together with an insider (insider.ts, from the protocol
 * description): it copies an honest STATUS at the sync, then at each outer step commits blind and
 * reveals a huge Δ, −1000 × the honest mean Δ it saw last, then NaN. Every one is screened and
 * named, the third removes it, and the honest members end with θ_global and loss bit-identical to
 * a run of the two of them alone.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DiLoCo } from '../../../src/parallel/diloco/diloco';
import type { DpEvent } from '../../../src/parallel/dp/dp';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { microTrainerPool } from '../../helpers/trainer-pool';
import { dp, f32, FRAME, Insider } from './insider';

const { fresh } = microTrainerPool(2, 300_000);
const RUN = 'dl-insider';
const H = 2;
const OUTER = 4;
const live: DiLoCo[] = [];
afterAll(() => live.forEach((d) => (d.stop('test done'), d.destroy())));

let lastSeen: Float32Array[] | null = null;

/** One outer exchange, commit then reveal (tags 0 commitment, 1 row, 2 the Δ, 3 echo, 4 relays), then the report (tag 5) copied from p0's. */
async function outerStep(ev: Insider, gstep: number, mine: (last: Float32Array[] | null) => Float32Array): Promise<void> {
  const id = dp.runId(RUN, 1);
  const commits = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 0, 120_000)));
  const c = f32.encode(mine(lastSeen));
  const cm = ev.commitment(Insider.context(id, gstep, 0, ['p0', 'p1', 'p2']), c);
  const row = Insider.row([Insider.slot(commits[0]), Insider.slot(commits[1]), Insider.slot(cm)]);
  for (const p of ['p0', 'p1']) {
    ev.send(p, FRAME.allGather, id, gstep, 0, cm);
    ev.send(p, FRAME.allGather, id, gstep, 1, row);
    ev.send(p, FRAME.allGather, id, gstep, 2, c);
  }
  lastSeen = (await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 2)))).map(f32.decode);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 3, row);
  const rep = await ev.recv('p0', id, gstep, 5);
  for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 5, rep);
}

describe('an insider in a DiLoCo group', () => {
  it('huge, −1000 × last mean and NaN pseudo-gradients (committed blind): screened, named, removed; θ_global and loss equal the honest pair alone', async () => {
    const opts = { run: RUN, mode: 'fp32' as const, silenceMs: 30_000, diloco: { innerSteps: H, wire: 'fp32' as const } };
    // The pair alone.
    let ts = fresh(2);
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
      // The sync (group step 0, tag 0): p0's status as its own, so it is handed nothing.
      const id = dp.runId(RUN, 1);
      const st = await ev.recv('p0', id, 0, 0, 120_000);
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 0, st);
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
