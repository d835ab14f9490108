/**
 * The peer-group panel's pure parts: run configs and their problems, the session wire (every
 * malformed message rejected with a reason, never thrown), the transport split that keeps session
 * messages away from the training drivers, and the store's transitions and summaries.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { modelBufferPlan } from '../../src/engine/plan/run-plan';
import { unsupportedFeatures } from '../../src/engine/scheme/scheme';
import { gradWireOf } from '../../src/engine/scheme/wire';
import { DpError } from '../../src/parallel/dp/dp';
import { CollectiveError } from '../../src/peers/collectives/group';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { parseRoomLink } from '../../src/peers/room/room';
import { createGroupStore, hashTrail, inviteOf, MAX_POINTS, shortPeer, wireSummary, type GroupStepPoint } from '../../src/state/group/group';
import { DEFAULT_DILOCO, DEFAULT_GROUP_CONFIG, dilocoOf, groupConfigProblem, groupRunLabel, groupSchemeFields, groupTrainOptions } from '../../src/state/group/config';
import { runError } from '../../src/state/group/errors';
import { decodeSession, encodeSession, isSessionBytes, MAX_SESSION_BYTES, type SessionMessage, splitTransport } from '../../src/state/group/wire';

const RUN: SessionMessage = { t: 'run', v: 1, id: 'gabc123', config: DEFAULT_GROUP_CONFIG, members: ['p0', 'p1'], by: 'p0' };

const point = (step: number, o: Partial<GroupStepPoint> = {}): GroupStepPoint => ({
  step, loss: 4, world: 2, wireBytes: 250, fp32WireBytes: 1000, bytesSent: 300, bytesReceived: 300, commMs: 10, computeMs: 30, stepMs: 40, elapsedMs: 40 * (step + 1), tokens: 256, hash: step * 17, ...o,
});

describe('group run config', () => {
  it('accepts the default on any group size, and says why a run cannot go', () => {
    for (const n of [1, 2, 8]) expect(groupConfigProblem(DEFAULT_GROUP_CONFIG, n)).toBeNull();
    expect(groupConfigProblem(DEFAULT_GROUP_CONFIG, 9)).toMatch(/at most 8/);
    expect(groupConfigProblem({ ...DEFAULT_GROUP_CONFIG, batch: 0 }, 2)).toMatch(/batch/);
    expect(groupConfigProblem({ ...DEFAULT_GROUP_CONFIG, preset: 'huge' }, 2)).toMatch(/preset/);
    expect(groupConfigProblem({ ...DEFAULT_GROUP_CONFIG, extra: 1 }, 2)).not.toBeNull();
    const tp = { ...DEFAULT_GROUP_CONFIG, mode: 'tp-taco' as const };
    expect(groupConfigProblem(tp, 1)).toMatch(/at least 2/);
    expect(groupConfigProblem(tp, 2)).toBeNull();
    // micro has 2 KV heads: no 3- or 4-way split.
    expect(groupConfigProblem(tp, 3)).toMatch(/micro cannot be split across 3 members: .*KV heads/);
    // TACO's groups of 128 along a rank's chunk of B·T·C/2 values.
    expect(groupConfigProblem({ ...tp, batch: 1, seq: 3 }, 2)).toMatch(/multiple of 64/);
  });

  it('DiLoCo mode: defaults, its fields validated, label and scheme fields', () => {
    const d = { ...DEFAULT_GROUP_CONFIG, mode: 'diloco' as const };
    expect(groupConfigProblem(d, 2)).toBeNull();
    expect(dilocoOf(d)).toEqual({ innerSteps: 50, wire: 'int8', fragments: 1, outerLr: 0.7, outerMomentum: 0.9 });
    expect(dilocoOf(DEFAULT_GROUP_CONFIG)).toBeNull();
    const with_ = (o: Partial<NonNullable<typeof d['diloco']>>) => ({ ...d, diloco: { ...DEFAULT_DILOCO, ...o } });
    expect(groupConfigProblem(with_({ innerSteps: 10, fragments: 2, wire: 'int4' }), 2)).toBeNull();
    expect(groupRunLabel(with_({ innerSteps: 10, fragments: 2, wire: 'int4' }))).toBe('DiLoCo H10 int4 streaming ×2 · micro');
    expect(groupSchemeFields(d, 2)).toMatch(/diloco H 50 · wire int8 · fragments 1/);
    expect(groupConfigProblem(with_({ innerSteps: 10, fragments: 3 }), 2)).toMatch(/multiple of the 3 fragments/);
    expect(groupConfigProblem(with_({ innerSteps: 4, fragments: 4 }), 2)).toMatch(/4 fragments for micro, which has 2 layers/);
    expect(groupConfigProblem(with_({ outerMomentum: 1 }), 2)).toMatch(/outerMomentum/);
    expect(groupConfigProblem(with_({ wire: 'fp16' as never }), 2)).toMatch(/wire/);
    expect(groupConfigProblem({ ...DEFAULT_GROUP_CONFIG, diloco: DEFAULT_DILOCO }, 2)).toMatch(/only for the DiLoCo mode/);
  });

  it('maps to engine options: TP degree = group size, no evaluation; DP keeps the fp32 model', () => {
    const tp = groupTrainOptions({ ...DEFAULT_GROUP_CONFIG, mode: 'tp-fp32', steps: 7 }, 2);
    expect(tp.scheme?.tp).toEqual({ degree: 2, codec: 'fp32', group: 128 });
    expect(tp.optimizer.total_steps).toBe(7);
    expect(tp.evalEvery).toBe(0);
    // DP's mode is the scheme's gradient wire format; the model itself stays fp32 (the same plan as no scheme).
    const dp8 = groupTrainOptions(DEFAULT_GROUP_CONFIG, 3);
    const dp32 = groupTrainOptions({ ...DEFAULT_GROUP_CONFIG, mode: 'dp-fp32' }, 3);
    expect(gradWireOf(dp8.scheme!.grads.wire)).toBe('int8');
    expect(gradWireOf(dp32.scheme!.grads.wire)).toBe('fp32');
    expect(unsupportedFeatures(dp8.scheme!)).toEqual([]);
    for (const o of [dp8, dp32]) {
      expect(modelBufferPlan(o.model, o.batch, o.seq, { scheme: o.scheme })).toEqual(modelBufferPlan(o.model, o.batch, o.seq));
      expect(o.scheme!.tp.degree).toBe(1);
    }
    expect(groupSchemeFields(DEFAULT_GROUP_CONFIG, 3)).toBe('grads.wire int8 · group 256 · nearest');
    expect(groupSchemeFields({ ...DEFAULT_GROUP_CONFIG, mode: 'dp-fp32' }, 3)).toBe('grads.wire fp32');
    expect(groupSchemeFields({ ...DEFAULT_GROUP_CONFIG, mode: 'tp-taco' }, 2)).toBe('tp.degree 2 · tp.codec taco');
    expect(groupRunLabel({ ...DEFAULT_GROUP_CONFIG, mode: 'dp-int8' })).toBe('DP AGoQ int8 · micro');
    expect(groupRunLabel({ ...DEFAULT_GROUP_CONFIG, mode: 'tp-taco', preset: 'tiny' })).toBe('TP TACO · tiny');
  });
});

describe('session wire', () => {
  it('round-trips every message kind', () => {
    const all: SessionMessage[] = [
      RUN,
      { t: 'ready', id: 'gabc123' },
      { t: 'step', id: 'gabc123', step: 3, world: 2, loss: 4.1, hash: 0xdeadbeef, stepMs: 12, commMs: 3, computeMs: 9 },
      { t: 'step', id: 'gabc123', step: 4, world: 2, loss: null, hash: null, stepMs: 0, commMs: 0, computeMs: 0 },
      { t: 'stop', id: 'gabc123', after: 9, reason: 'Stop pressed' },
      { t: 'quit', id: 'gabc123', reason: 'left the group' },
    ];
    for (const m of all) {
      const bytes = encodeSession(m);
      expect(isSessionBytes(bytes)).toBe(true);
      expect(decodeSession(bytes)).toEqual({ ok: true, msg: m });
    }
  });

  it('rejects malformed messages with a reason and never throws', () => {
    const enc = (x: unknown) => {
      const body = new TextEncoder().encode(JSON.stringify(x));
      return Uint8Array.from([0x57, 0x47, 0x47, 0x53, ...body]);
    };
    const bad: [Uint8Array, RegExp][] = [
      [new Uint8Array(0), /not a session/],
      [Uint8Array.from([0x57, 0x47, 0x50, 0x47, 1, 2]), /not a session/],
      [Uint8Array.from([0x57, 0x47, 0x47, 0x53, 0xff, 0xfe]), /not UTF-8 JSON/],
      [enc({ ...RUN, v: 2 }), /malformed.*v/],
      [enc({ ...RUN, config: { ...DEFAULT_GROUP_CONFIG, steps: -1 } }), /config\.steps/],
      [enc({ ...RUN, members: Array.from({ length: 9 }, (_, i) => `p${i}`) }), /members/],
      [enc({ ...RUN, by: 'p0; drop' }), /by/],
      [enc({ t: 'step', id: 'g', step: 1, world: 2, loss: 'NaN', hash: null, stepMs: 1, commMs: 1, computeMs: 1 }), /loss/],
      [enc({ t: 'stop', id: 'g', after: 1, reason: 'x', extra: true }), /malformed/],
      [enc({ t: 'hello' }), /malformed/],
      [enc({ t: 'quit', id: 'g', reason: 'x'.repeat(301) }), /reason/],
      [Uint8Array.from([0x57, 0x47, 0x47, 0x53, ...new Uint8Array(MAX_SESSION_BYTES)]), /oversized/],
    ];
    for (const [bytes, why] of bad) {
      const d = decodeSession(bytes);
      expect(d.ok).toBe(false);
      if (!d.ok) expect(d.reason).toMatch(why);
    }
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.boolean(), (tail, magic) => {
        const bytes = magic ? Uint8Array.from([0x57, 0x47, 0x47, 0x53, ...tail]) : tail;
        const d = decodeSession(bytes);
        return d.ok ? typeof d.msg.t === 'string' : d.reason.length > 0;
      }),
      { numRuns: 2000 },
    );
    expect(() => encodeSession({ t: 'quit', id: 'g', reason: 'x'.repeat(5000) })).toThrow(/over 4096/);
  });

  it('splits a transport: training code never sees session messages, the session never sees frames', async () => {
    const { transports } = LoopbackHub.group(2);
    const [x, y] = transports.map(splitTransport);
    const frames: Uint8Array[] = [];
    const session: SessionMessage[] = [];
    const rejects: string[] = [];
    y.training.onMessage((_, b) => frames.push(b));
    y.onSession((_, m) => session.push(m), (_, why) => rejects.push(why));
    expect(x.sendSession('p1', RUN)).toBe(true);
    x.training.send('p1', Uint8Array.from([0x57, 0x47, 0x50, 0x47, 9]));
    transports[0].send('p1', Uint8Array.from([0x57, 0x47, 0x47, 0x53, 0x7b])); // 'WGGS{': broken JSON
    await new Promise((r) => setTimeout(r, 0));
    expect(session).toEqual([RUN]);
    expect(frames.map((f) => [...f])).toEqual([[0x57, 0x47, 0x50, 0x47, 9]]);
    expect(rejects).toEqual(['session message is not UTF-8 JSON']);
    expect(x.sendSession('nobody', RUN)).toBe(false);
    // Closing a run's view leaves the room's transport open.
    x.training.close();
    expect(transports[0].peers()).toEqual(['p1']);
  });
});

describe('run errors', () => {
  it('names what went wrong: diverged weights with the driver\'s report, a tensor-parallel member leaving, a refusal', () => {
    const dp = { failure: null, tensorParallel: false, completed: 12 };
    const report = 'weights differ after step 11 (12 steps taken): crc32 0x0000abcd on p0, p1; crc32 0x00001234 on p2. Diverged: p2. The run stops on every peer.';
    expect(runError(new DpError('diverged', report, 11, ['p2']), dp)).toEqual({ title: 'Weights diverged', message: report });
    expect(runError(new DpError('refused', 'p0 refused this peer: another configuration', 0), dp).title).toBe('Refused by the group');
    const left = runError(new CollectiveError('peer-left', 'peer p1 left'), { ...dp, tensorParallel: true });
    expect(left.title).toBe('A member left');
    expect(left.message).toMatch(/peer p1 left: tensor parallelism cannot continue .* after step 12/);
    expect(runError(new CollectiveError('peer-left', 'peer p1 left'), dp).title).toBe('Training failed');
    expect(runError(new Error('x'), { ...dp, failure: 'p1 left the run' })).toEqual({ title: 'The run cannot continue', message: 'p1 left the run' });
    expect(runError('boom', dp)).toEqual({ title: 'Training failed', message: 'boom' });
  });
});

describe('group store', () => {
  it('goes from lobby to room and back; reads the invite of a link', () => {
    const link = 'http://h:5173/?room=abcdefghijklmnopqrstuvwxyz';
    expect(inviteOf(link)).toEqual({ invite: parseRoomLink(link), inviteError: null });
    expect(inviteOf('http://h:5173/')).toEqual({ invite: null, inviteError: null });
    expect(inviteOf('http://h:5173/?room=short').inviteError).toMatch(/malformed/);
    const store = createGroupStore(inviteOf(link), () => 5);
    const s = () => store.getState();
    s().connecting();
    expect(s().phase).toBe('connecting');
    s().joinFailed('wrong passphrase: peer x proved a different one');
    expect(s()).toMatchObject({ phase: 'idle', joinError: /wrong passphrase/, invite: { room: 'abcdefghijklmnopqrstuvwxyz' } });
    s().joined({ id: 'r', link, role: 'peer', selfId: 'me', hasPassphrase: true, server: 'http://h:5173/peerjs' });
    expect(s()).toMatchObject({ phase: 'joined', joinError: null, invite: null });
    s().peerReport('p1', { t: 'step', id: 'g', step: 2, world: 2, loss: 4, hash: 1, stepMs: 5, commMs: 1, computeMs: 4 });
    expect(s().reports.p1).toMatchObject({ runId: 'g', step: 2, at: 5 });
    s().peerGone('p1');
    expect(s().reports).toEqual({});
    s().left();
    expect(s()).toMatchObject({ phase: 'idle', room: null, roster: [], invite: { room: 'abcdefghijklmnopqrstuvwxyz' } });
  });

  it('keeps runs numbered with their points, caps notices, and summarises wire bytes and hashes', () => {
    const store = createGroupStore();
    const s = () => store.getState();
    s().addRun({ id: 'a', config: DEFAULT_GROUP_CONFIG, startedBy: 'p0', members: ['p0', 'p1'], joinedLate: false });
    s().addRun({ id: 'b', config: { ...DEFAULT_GROUP_CONFIG, mode: 'tp-fp32' }, startedBy: 'p1', members: ['p0', 'p1'], joinedLate: false });
    expect(s().runs.map((r) => r.label)).toEqual(['#1 DP AGoQ int8 · micro', '#2 TP fp32 · micro']);
    s().addPoint('a', point(0), { phase: 'step 1', members: ['p0'] });
    s().addPoint('a', point(1, { hash: null }));
    s().addPoint('a', point(2, { wireBytes: 350, commMs: 30 }));
    const a = s().runs[0];
    expect(a).toMatchObject({ phase: 'step 1', members: ['p0'], status: 'preparing' });
    expect(a.points.map((p) => p.step)).toEqual([0, 1, 2]);
    expect(s().runs[1].points).toEqual([]);
    expect(hashTrail(a.points)).toBe('0:00000000,2:00000022');
    const w = wireSummary(a.points);
    expect(w).toMatchObject({ steps: 3, wire: 850, fp32: 3000 });
    expect(w.ratio).toBeCloseTo(850 / 3000, 12);
    // Waiting on the network: communication over the steps' wall-clock time.
    expect(w.commShare).toBeCloseTo(50 / 120, 12);
    // This member's exchange bytes per token the group trained (256 a step).
    expect(w.bytesPerToken).toBeCloseTo(850 / 768, 12);
    expect(wireSummary([point(0, { tokens: 0 })]).bytesPerToken).toBeNull();
    expect(wireSummary([]).ratio).toBeNull();
    for (let i = 0; i < 100; i++) s().notice('info', `n${i}`);
    expect(s().notices.length).toBe(60);
    expect(s().notices.at(-1)?.text).toBe('n99');
    expect(shortPeer('abcdefghijklmnop-qrstuvwxyz234567')).toBe('qrstuv');
  });

  it('thins a very long run instead of growing without bound, keeping its whole span', () => {
    const store = createGroupStore();
    store.getState().addRun({ id: 'a', config: DEFAULT_GROUP_CONFIG, startedBy: 'p0', members: ['p0'], joinedLate: false });
    for (let i = 0; i < MAX_POINTS + 5; i++) store.getState().addPoint('a', point(i));
    const pts = store.getState().runs[0].points;
    expect(pts.length).toBe(MAX_POINTS / 2 + 5);
    expect(pts[0].step).toBe(1);
    expect(pts[1].step).toBe(3);
    expect(pts.slice(-6).map((p) => p.step)).toEqual([MAX_POINTS - 1, MAX_POINTS, MAX_POINTS + 1, MAX_POINTS + 2, MAX_POINTS + 3, MAX_POINTS + 4]);
  });
});
