/**
 * A forged WELCOME (issue 38: a WELCOME listing only the insider and the joiner was a majority of its
 * own list, so the joiner trained apart with the insider). The joiner is the product's member group
 * (MemberGroup, a stand-in trainer: joining needs no GPU); the group's members and the insider are
 * clients written from the protocol (insider.ts: signed CLAIMs and WELCOMEs). Members answer a HELLO
 * with a signed CLAIM, which makes them voters on the joiner's welcomes: the forged welcome sent
 * first is one voice of four, and the joiner enters the real group.
 */
import { describe, expect, it } from 'vitest';
import { TextDataset } from '../../../src/engine/train/data/data';
import type { Trainer } from '../../../src/engine/train/trainer';
import { WelcomeVotes } from '../../../src/parallel/dp/joins';
import { MemberGroup } from '../../../src/parallel/dp/member-group';
import { DpError, type DpEvent } from '../../../src/parallel/dp/types';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import { dp, Insider } from './insider';

const RUN = 'fw';
const GROUP = ['a', 'b', 'c', 'i'];
const REAL_EPOCH = 4;
const FORGED_EPOCH = 9;

/** What a member group reads of a trainer before its first sync (n floats of state, step 0). */
function standIn(n = 64): Trainer {
  const state = { weights: new Float32Array(n).fill(0.5), m: new Float32Array(n), v: new Float32Array(n), step: 0 };
  return {
    model: { training: true, plan: { grads: null }, layout: { totalFloats: n } },
    plan: { model: {} },
    opts: { model: 'micro', batch: 1, seq: 8, seed: 1, optimizer: {} },
    data: TextDataset.fromTokens(Int32Array.from({ length: 256 }, (_, k) => k % 7), 1),
    stepIndex: 0,
    trainingState: async () => state,
    restoreTrainingState: () => {},
  } as unknown as Trainer;
}

function setup(o: { realWelcome: boolean; claimDelayMs?: number; insiderRefuses?: boolean; insiderQuiet?: boolean; onEvent?: (e: DpEvent) => void; joinTimeoutMs?: number }) {
  const hub = new LoopbackHub();
  const clients = Object.fromEntries(GROUP.map((id) => [id, new Insider(hub.endpoint(id))]));
  const joiner = new MemberGroup(standIn(), hub.endpoint('j'), { run: RUN, mode: 'fp32', heartbeatMs: 1000, silenceMs: 5000, joinTimeoutMs: o.joinTimeoutMs ?? 6000, onEvent: o.onEvent }, { step: async () => { throw new Error('no steps here'); } });
  const fp = joiner.fingerprint;
  const done = { stop: false };
  // The insider: a welcome into a "group" of itself and the joiner, at the joiner's first HELLO.
  const insider = (async () => {
    await clients.i.recvControl('j', RUN, 1);
    if (o.insiderQuiet) return;
    if (o.insiderRefuses) clients.i.control('j', RUN, Insider.refuse(`removed from run '${RUN}': screened out 3 steps in a row`));
    else clients.i.control('j', RUN, clients.i.signedMembers('welcome', fp, FORGED_EPOCH, ['i', 'j']));
  })();
  // The real members: a signed CLAIM of their group at once; the welcome at their step's end.
  const members = ['a', 'b', 'c'].map(async (id) => {
    await clients[id].recvControl('j', RUN, 1);
    await new Promise((r) => setTimeout(r, o.claimDelayMs ?? 30)); // a member answers a moment after the insider
    clients[id].control('j', RUN, clients[id].signedMembers('claim', fp, REAL_EPOCH - 1, GROUP));
    if (!o.realWelcome) return;
    await new Promise((r) => setTimeout(r, 300));
    if (!done.stop) clients[id].control('j', RUN, clients[id].signedMembers('welcome', fp, REAL_EPOCH, [...GROUP, 'j']));
  });
  return { clients, joiner, fp, done, ready: Promise.all([insider, ...members]) };
}

describe('a forged WELCOME to a joiner', () => {
  it('the old rule took a welcome listing only the insider and the joiner; the claims of the real members outvote it', () => {
    const none = new Set<string>();
    expect(new WelcomeVotes().add('i', 'j', FORGED_EPOCH, ['i', 'j'], none)).toEqual({ epoch: FORGED_EPOCH, members: ['i', 'j'] });
    const v = new WelcomeVotes();
    const claimers = new Set(['a', 'b', 'c', 'i']);
    expect(v.add('i', 'j', FORGED_EPOCH, ['i', 'j'], none, claimers)).toBeNull();
    expect(v.add('a', 'j', REAL_EPOCH, [...GROUP, 'j'], none, claimers)).toBeNull();
    expect(v.add('b', 'j', REAL_EPOCH, [...GROUP, 'j'], none, claimers)).toBeNull();
    expect(v.add('c', 'j', REAL_EPOCH, [...GROUP, 'j'], none, claimers)).toEqual({ epoch: REAL_EPOCH, members: [...GROUP, 'j'].sort() });
  });

  /** The joiner enters the real group: its first collective, a signed STATUS, goes to every real member's epoch, nothing to the forged one. */
  async function entersRealGroup(o: Parameters<typeof setup>[0]): Promise<void> {
    const { clients, joiner, ready, done } = setup(o);
    const joining = joiner.formGroup().catch((e) => e);
    await ready;
    const st = await Promise.all(['a', 'b', 'c', 'i'].map((p) => clients[p].recv('j', dp.runId(RUN, REAL_EPOCH), 0, 0, 5000)));
    expect(st.every((s) => s.length > 96 && s[4] === 6)).toBe(true);
    expect(clients.i.has('j', dp.runId(RUN, FORGED_EPOCH), 0, 0)).toBe(false);
    done.stop = true;
    joiner.stop('test done');
    expect(await joining).toBeInstanceOf(DpError);
  }

  it('sent first, it is refused: the joiner enters the real group (its signed status goes to the real epoch, nothing to the forged one)', async () => {
    await entersRealGroup({ realWelcome: true });
  }, 20_000);

  it('the real members\' claims come 2.5 heartbeats after it: the joiner waits for every connected peer, and enters the real group', async () => {
    // Before, the joiner weighed welcomes two heartbeats after its HELLO and took the forged one alone.
    await entersRealGroup({ realWelcome: true, claimDelayMs: 2500 });
  }, 20_000);

  it('one insider\'s REFUSE is named, not obeyed: the joiner enters the group the real members welcome it into', async () => {
    const events: string[] = [];
    const { clients, joiner, ready, done } = setup({ realWelcome: true, insiderRefuses: true, onEvent: (e) => events.push(`${e.kind} ${e.peers.join(',')}`) });
    const joining = joiner.formGroup().catch((e) => e);
    await ready;
    const st = await Promise.all(['a', 'b', 'c', 'i'].map((p) => clients[p].recv('j', dp.runId(RUN, REAL_EPOCH), 0, 0, 5000)));
    expect(st.every((s) => s.length > 96 && s[4] === 6)).toBe(true);
    expect(events).toContain('refused i');
    done.stop = true;
    joiner.stop('test done');
    expect(await joining).toBeInstanceOf(DpError);
  }, 20_000);

  it('an insider that keeps quiet delays nobody: the welcomes of a majority of every linked peer are taken at once', async () => {
    // The joiner waits for every linked peer's answer only where one could still outvote what it has.
    const { clients, joiner, ready, done } = setup({ realWelcome: true, insiderQuiet: true });
    const t0 = performance.now();
    const joining = joiner.formGroup().catch((e) => e);
    await ready;
    await Promise.all(['a', 'b', 'c'].map((p) => clients[p].recv('j', dp.runId(RUN, REAL_EPOCH), 0, 0, 5000)));
    expect(performance.now() - t0).toBeLessThan(2000); // the cap is 3 s here
    done.stop = true;
    joiner.stop('test done');
    expect(await joining).toBeInstanceOf(DpError);
  }, 20_000);

  it('refused by a majority of the members it heard (each refuses: removed from the run), the joiner stops, naming them', async () => {
    const hub = new LoopbackHub();
    const clients = Object.fromEntries(GROUP.map((id) => [id, new Insider(hub.endpoint(id))]));
    const joiner = new MemberGroup(standIn(), hub.endpoint('j'), { run: RUN, mode: 'fp32', heartbeatMs: 1000, silenceMs: 5000, joinTimeoutMs: 8000 }, { step: async () => { throw new Error('no steps here'); } });
    // a, b, c refuse (the joiner was removed from the run); the insider claims, to keep it waiting.
    void Promise.all(GROUP.map(async (id) => {
      await clients[id].recvControl('j', RUN, 1);
      clients[id].control('j', RUN, id === 'i' ? clients.i.signedMembers('claim', joiner.fingerprint, REAL_EPOCH - 1, GROUP) : Insider.refuse(`removed from run '${RUN}': withheld its report`));
    }));
    const err = await joiner.formGroup().catch((e) => e);
    expect(err).toBeInstanceOf(DpError);
    expect(err.code).toBe('refused');
    expect(err.message).toMatch(/majority.*a: removed.*b: removed.*c: removed/);
  }, 20_000);

  it('with no real welcome, it is still refused: the joiner times out naming what it saw', async () => {
    const { joiner, ready } = setup({ realWelcome: false, joinTimeoutMs: 3000 });
    const err = await joiner.formGroup().catch((e) => e);
    await ready;
    expect(err).toBeInstanceOf(DpError);
    expect(err.code).toBe('no-group');
    expect(err.message).toMatch(/epoch 9 \[i,j\] from i.*claimed the run: a, b, c|claimed the run: .*a.*b.*c/);
  }, 20_000);
});
