/**
 * The group panel's controller without a browser: several controllers in one process, each with its
 * own store, over loopback endpoints (a room), training micro on one Dawn device. What the page's
 * group does end to end, minus WebRTC: one Start starts every member, a late member catches up, a
 * member leaving mid-run leaves the others training, Stop is group-wide, tensor parallelism tracks a
 * single-device run, and a tensor-parallel member leaving ends the run with a clear error.
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { LoopbackHub, type LoopbackTransport } from '../../src/peers/transport/loopback';
import { parseRoomLink } from '../../src/peers/room/room';
import type { RosterEntry } from '../../src/peers/room/roster';
import { emptyStats, Listeners, type PeerId } from '../../src/peers/transport/transport';
import { PRESETS } from '../../src/engine/model/config';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { Trainer } from '../../src/engine/train/trainer';
import { activeRun, createGroupStore, type GroupRun, type GroupStore, wireSummary } from '../../src/state/group/group';
import type { GroupRunConfig } from '../../src/state/group/config';
import { GroupController } from '../../src/state/group/controller';
import type { RoomTransport } from '../../src/state/group/deps';
import { testRuntime } from '../helpers/gpu';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 100_000);
const PAGE = 'http://lab.test/';
const LINK = `${PAGE}?room=abcdefghijklmnopqrstuvwxyz`;
const CONFIG: GroupRunConfig = { mode: 'dp-int8', preset: 'micro', steps: 10, batch: 2, seq: 16, seed: 3 };

/**
 * A loopback endpoint shaped like a room transport. The endpoint enters the hub only once the
 * controller awaits admission (as a PeerJS link is admitted after the page subscribed), so no
 * announcement sent to a newcomer can arrive before it listens.
 */
class LoopbackRoom implements RoomTransport {
  private ep: LoopbackTransport | null = null;
  private readonly msg = new Listeners<[PeerId, Uint8Array]>();
  private readonly joins = new Listeners<[PeerId]>();
  private readonly leaves = new Listeners<[PeerId]>();
  private readonly empty = emptyStats();

  constructor(
    private readonly hub: LoopbackHub,
    readonly id: PeerId,
  ) {}

  get stats() {
    return this.ep?.stats ?? this.empty;
  }
  get identity() {
    return this.ep?.identity;
  }
  whenAdmitted(): Promise<void> {
    if (!this.ep) {
      const ep = this.hub.endpoint(this.id);
      ep.onMessage((f, b) => this.msg.emit(f, b));
      ep.onPeerJoin((p) => this.joins.emit(p));
      ep.onPeerLeave((p) => this.leaves.emit(p));
      this.ep = ep;
    }
    return Promise.resolve();
  }
  peers = () => this.ep?.peers() ?? [];
  send = (peer: PeerId, bytes: Uint8Array) => {
    if (!this.ep) throw new Error('not admitted');
    this.ep.send(peer, bytes);
  };
  bufferedAmount = (peer: PeerId) => this.ep?.bufferedAmount(peer) ?? 0;
  waitForBufferedBelow = (peer: PeerId, low: number) => this.ep?.waitForBufferedBelow(peer, low) ?? Promise.resolve();
  onMessage = (h: (from: PeerId, b: Uint8Array) => void) => this.msg.add(h);
  onPeerJoin = (h: (p: PeerId) => void) => this.joins.add(h);
  onPeerLeave = (h: (p: PeerId) => void) => this.leaves.add(h);
  onProblem = () => () => {};
  roster = (): RosterEntry[] =>
    [this.id, ...this.peers()].sort().map((id, rank) => ({
      id, self: id === this.id, role: 'peer', rank, state: 'admitted', rttMs: null, bytesSent: 0, bytesReceived: 0, rejected: 0, lastSeen: null,
    }));
  close = () => this.ep?.close();
}

interface Page {
  name: string;
  store: GroupStore;
  ctl: GroupController;
}

const pages: Page[] = [];
afterEach(() => {
  for (const p of pages.splice(0)) p.ctl.dispose();
});

function room(): (name: string, invite?: boolean) => Page {
  const hub = new LoopbackHub();
  return (name, invite = true) => {
    const store = createGroupStore({ invite: invite ? parseRoomLink(LINK) : null });
    const ctl = new GroupController(store, {
      pageUrl: invite ? LINK : PAGE,
      openTransport: async () => new LoopbackRoom(hub, name),
      runtime: testRuntime,
      loadText: async () => text,
      rosterEveryMs: 50,
      dp: { silenceMs: 5_000 },
      tpTimeoutMs: 20_000,
    });
    const page = { name, store, ctl };
    pages.push(page);
    return page;
  };
}

const lastRun = (p: Page): GroupRun => p.store.getState().runs.at(-1)!;

async function until(what: string, cond: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const hashes = (r: GroupRun) => new Map(r.points.filter((p) => p.hash !== null).map((p) => [p.step, p.hash]));

describe('group controller over loopback (micro on Dawn)', () => {
  it('one Start trains every member; a late member catches up; a member leaving leaves the others training', { timeout: 480_000 }, async () => {
    const page = room();
    const a = page('a', false);
    await a.ctl.create();
    const b = page('b');
    await b.ctl.join();
    expect(a.store.getState().phase).toBe('joined');
    expect(b.store.getState().room?.link).toBe(LINK);
    a.store.getState().setDraft(CONFIG);
    // b's own draft (a custom model) gives way to the run a started, whole.
    b.store.getState().setDraft({ model: { ...PRESETS.micro, hidden_size: 64 } });
    expect(a.ctl.start()).toBe(true);
    // Both members build their micro model on this thread first (compiling blocks it): ~70 s on a busy 2-core SwiftShader.
    await until('two steps on a', () => lastRun(a).points.length >= 2, 240_000);
    // b trains the run it was told about, with the same config.
    expect(lastRun(b).id).toBe(lastRun(a).id);
    expect(b.store.getState().draft).toEqual(CONFIG);

    const c = page('c');
    await c.ctl.join();
    await until('c catching up', () => (lastRun(c)?.points.length ?? 0) >= 2);
    expect(lastRun(c).joinedLate).toBe(true);
    expect(lastRun(c).caughtUpAt).toBeGreaterThan(0);
    expect(lastRun(c).points[0].step).toBeGreaterThan(0);
    const joinedAt = lastRun(c).points[0].step;

    b.ctl.leave();
    await until('a and c done', () => [a, c].every((p) => lastRun(p).status === 'done'));
    expect(b.store.getState().phase).toBe('idle');
    expect(lastRun(b).status).toBe('stopped');
    expect(a.store.getState().notices.some((n) => n.text.includes('b left the group'))).toBe(true);

    const [ha, hb, hc] = [a, b, c].map((p) => hashes(lastRun(p)));
    expect(ha.size).toBe(CONFIG.steps);
    for (const [step, h] of hb) expect(ha.get(step), `b at step ${step}`).toBe(h);
    for (const [step, h] of hc) expect(ha.get(step), `c at step ${step}`).toBe(h);
    expect(hc.size).toBe(CONFIG.steps - joinedAt);
    // Each member keeps the run's end checkpoint for download, the same model on both.
    for (const p of [a, c]) expect(lastRun(p).checkpointStep).toBe(CONFIG.steps);
    const [ca, cc] = [a, c].map((p) => p.ctl.checkpoint(lastRun(p).id)!);
    expect(JSON.parse(ca['config.json'])).toMatchObject({ hidden_size: PRESETS.micro.hidden_size });
    expect(Buffer.from(ca['model.safetensors']).equals(Buffer.from(cc['model.safetensors']))).toBe(true);
    expect(a.ctl.checkpoint('no-such-run')).toBeNull();
    // The time axis (from the start of this member's first step) and the tokens the group trained: each member's batch.
    const pts = lastRun(a).points;
    expect(pts[0].elapsedMs).toBeCloseTo(pts[0].stepMs, 6);
    for (const [i, p] of pts.entries()) {
      expect(p.tokens, `step ${p.step}`).toBe(CONFIG.batch * CONFIG.seq * p.world);
      if (i > 0) expect(p.elapsedMs - pts[i - 1].elapsedMs, `step ${p.step}`).toBeGreaterThanOrEqual(p.stepMs);
    }
    const worlds = lastRun(a).points.map((p) => p.world);
    expect(worlds).toContain(3);
    expect(worlds.at(-1)).toBe(2);
    // AGoQ's INT8 all-reduce against what fp32 would send for the same steps.
    const w = wireSummary(lastRun(a).points);
    expect(w.ratio).toBeGreaterThan(0.2);
    expect(w.ratio).toBeLessThan(0.3);
    // The roster and peer reports follow the room.
    await until('roster of two', () => a.store.getState().roster.length === 2);
    expect(Object.keys(a.store.getState().reports)).toEqual(['c']);
  });

  it('Stop ends the run on every member at the same step', async () => {
    const page = room();
    const a = page('a', false);
    await a.ctl.create();
    const b = page('b');
    await b.ctl.join();
    a.store.getState().setDraft({ ...CONFIG, mode: 'dp-fp32', steps: 10_000 });
    a.ctl.start();
    await until('a step on b', () => (lastRun(b)?.points.length ?? 0) >= 1);
    b.ctl.stop();
    await until('both stopped', () => [a, b].every((p) => lastRun(p).status === 'stopped'));
    const last = (p: Page) => lastRun(p).points.at(-1)!.step;
    expect(last(a)).toBe(last(b));
    expect(hashes(lastRun(a)).get(last(a))).toBe(hashes(lastRun(b)).get(last(b)));
    expect(activeRun(a.store.getState())).toBeNull();
    expect(a.ctl.start()).toBe(true); // free for the next run
  });

  it('tensor parallel over two members tracks a single-device run; a member leaving ends it with a clear error', async () => {
    const page = room();
    const a = page('a', false);
    await a.ctl.create();
    const b = page('b');
    await b.ctl.join();
    const steps = 3;
    a.store.getState().setDraft({ ...CONFIG, mode: 'tp-fp32', steps });
    a.ctl.start();
    await until('tp done', () => [a, b].every((p) => lastRun(p).status === 'done'));
    const single = await Trainer.create(await testRuntime(), defaultTrainOptions('micro', { steps, batch: CONFIG.batch, seq: CONFIG.seq, seed: CONFIG.seed, evalEvery: 0 }), text);
    for (const [s, p] of lastRun(a).points.entries()) {
      const m = await single.trainStep();
      expect(Math.abs(p.loss! - m.loss) / m.loss, `step ${s}`).toBeLessThan(1e-5);
      expect(lastRun(b).points[s].loss).toBe(p.loss);
      expect(p.wireBytes).toBe(p.fp32WireBytes);
      // Tensor parallel: the two shards train one batch.
      expect(p.tokens).toBe(CONFIG.batch * CONFIG.seq);
    }
    single.destroy();

    a.store.getState().setDraft({ ...CONFIG, mode: 'tp-taco', steps: 10_000 });
    a.ctl.start();
    await until('a taco step', () => lastRun(a).points.length >= 1);
    expect(wireSummary(lastRun(a).points).ratio).toBeLessThan(0.3);
    b.ctl.leave();
    await until('a stops', () => lastRun(a).status === 'error');
    expect(lastRun(a).error?.message).toMatch(/tensor parallelism|shard/);
  });
});
