/**
 * Data parallelism end to end on one Dawn device: several Trainers (micro, batch 2 × 16) in one
 * process, each behind its own loopback endpoint and DataParallel driver.
 */
import { describe, expect, it } from 'vitest';
import { DataParallel, type DataParallelOptions, DpError, type DpStepStats } from '../../src/parallel/dp/dp';
import { gradientAccess } from '../../src/parallel/dp/grads';
import { weightsHash } from '../../src/parallel/dp/wire';
import { decodeInt8Chunk, encodeInt8Chunk } from '../../src/peers/collectives/allreduce';
import { crc32, crc32Update } from '../../src/peers/collectives/crc32';
import { decodeFrame, encodeFrame, FrameType, HEADER_BYTES } from '../../src/peers/collectives/framing';
import { LoopbackHub, type LoopbackTransport } from '../../src/peers/transport/loopback';
import type { Transport } from '../../src/peers/transport/transport';
import { loadCheckpoint } from '../../src/engine/io/checkpoint';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { inMemoryData } from '../../src/engine/train/data/data';
import { Trainer } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';
import { microTrainerPool } from '../helpers/trainer-pool';

const { text, tok, B, optsFor, initial: initialState, fresh } = microTrainerPool();

interface Group {
  hub: LoopbackHub;
  transports: LoopbackTransport[];
  dps: DataParallel[];
}

function group(trainers: Trainer[], mode: 'fp32' | 'int8', extra: Partial<DataParallelOptions> = {}, wrap: (t: LoopbackTransport, i: number) => Transport = (t) => t): Group {
  const { hub, transports } = LoopbackHub.group(trainers.length);
  const members = transports.map((t) => t.id);
  const dps = trainers.map((t, i) => new DataParallel(t, wrap(transports[i], i), { run: 'test', mode, members, silenceMs: 5_000, ...extra }));
  return { hub, transports, dps };
}

const stepAll = (dps: DataParallel[]) => Promise.all(dps.map((d) => d.step()));
const hashOf = async (t: Trainer) => weightsHash(await t.model.readFlat('weights'));

/** Every peer agrees on the step, the weights hash (also recomputed here) and the group loss. */
async function expectInStep(stats: DpStepStats[], trainers: Trainer[]): Promise<void> {
  const hashes = await Promise.all(trainers.map(hashOf));
  for (let i = 0; i < stats.length; i++) {
    expect(stats[i].step).toBe(stats[0].step);
    expect(stats[i].weightsHash).toBe(hashes[i]);
    expect(hashes[i]).toBe(hashes[0]);
    expect(stats[i].groupLoss).toBe(stats[0].groupLoss);
  }
}

/**
 * A transport whose outgoing frames pass through `tamper`: returned as is, replaced (and re-sealed:
 * a sender that lies, not a noisy link) or swallowed (null).
 */
function tampering(inner: Transport, tamper: (to: string, frame: Uint8Array) => Uint8Array | null): Transport {
  return new Proxy(inner, {
    get(target, prop, recv) {
      if (prop === 'send') {
        return (peer: string, bytes: Uint8Array) => {
          const t = tamper(peer, bytes);
          if (!t) return;
          if (t !== bytes) new DataView(t.buffer, t.byteOffset).setUint32(40, crc32Update(crc32(t.subarray(0, 40)), t.subarray(HEADER_BYTES)), true);
          target.send(peer, t);
        };
      }
      const v = Reflect.get(target, prop, recv);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

describe('data-parallel training', () => {
  it('3 peers, fp32 and INT8 exchange: identical weights every step, the loss falls, INT8 moves ≤ 30% of the bytes', async () => {
    const rt = await testRuntime();
    const wire: Record<string, number> = {};
    for (const mode of ['fp32', 'int8'] as const) {
      const ts = fresh(3);
      const g = group(ts, mode);
      // While the group trains, p0 gets junk in p2's name: random bytes, well-framed control messages
      // and far-future epoch frames with random payloads, frames of another run. Rejected, harmless.
      const rng = new Rng(3);
      const runTag = crc32(new TextEncoder().encode('dp-run:test')) >>> 16;
      const junk = setInterval(() => {
        const payload = Uint8Array.from({ length: rng.int(100) }, () => rng.int(256));
        if (rng.int(2) === 0) payload.set([0x57, 0x44, 0x50, 0x31, 1 + rng.int(8), 1, 0, 0].slice(0, payload.length)); // a DP header
        const runId = [runTag << 16, (runTag << 16) | 0xfff0, (runTag ^ 1) << 16][rng.int(3)] >>> 0;
        const frame = encodeFrame({ type: FrameType.Broadcast, runId, step: 0, tag: 0, seq: rng.int(1000), chunkIndex: 0, chunkCount: 1, totalLength: payload.length }, payload);
        g.hub.inject('p2', 'p0', rng.int(3) === 0 ? payload : frame);
      }, 3);
      const losses: number[] = [];
      let sent = 0;
      try {
        for (let s = 0; s < 3; s++) {
          const st = await stepAll(g.dps);
          await expectInStep(st, ts);
          expect(st.map((x) => [x.rank, x.world])).toEqual([[0, 3], [1, 3], [2, 3]]);
          losses.push(st[0].groupLoss!);
          sent += st[0].exchangeBytesSent;
          if (mode === 'fp32') expect(st[0].wireRatio).toBeCloseTo(1, 6);
        }
      } finally {
        clearInterval(junk);
      }
      expect(g.dps[0].rejected).toBeGreaterThan(50);
      expect(losses[2], `${mode} losses ${losses}`).toBeLessThan(losses[0] - 0.05);
      wire[mode] = sent;
      g.dps.forEach((d) => d.stop());
    }
    console.log(`3 peers, 3 steps: exchange bytes sent by rank 0 fp32 ${wire.fp32}, int8 ${wire.int8} (${(100 * wire.int8 / wire.fp32).toFixed(1)}%)`);
    expect(wire.int8 / wire.fp32).toBeLessThanOrEqual(0.3);
    expect(wire.int8 / wire.fp32).toBeGreaterThan(0.2);

    // AGoQ: INT8 gradient storage, its blocks exchanged with the INT8 all-reduce (2 peers).
    const agoq = await Promise.all([0, 1].map(() => Trainer.create(rt, optsFor({ scheme: SCHEME_PRESETS.agoq }), text, { tokenizer: tok })));
    try {
      // The exchange lays tensors out on the storage's 256-blocks, so the wire's INT8 blocks of a
      // backward's gradient are the stored ones: encoding them again changes nothing.
      await agoq[0].computeGradients(inMemoryData(agoq[0].data).rows(0, 16, 'train', 0, B));
      const stored = await gradientAccess(agoq[0].model).read();
      expect(stored.some((v) => v !== 0)).toBe(true);
      expect(Buffer.from(decodeInt8Chunk(encodeInt8Chunk(stored), stored.length).buffer).equals(Buffer.from(stored.buffer))).toBe(true);
      const g = group(agoq, 'int8');
      const losses: number[] = [];
      let last: DpStepStats[] = [];
      for (let s = 0; s < 3; s++) {
        last = await stepAll(g.dps);
        await expectInStep(last, agoq);
        losses.push(last[0].groupLoss!);
      }
      expect(losses[2], `AGoQ losses ${losses}`).toBeLessThan(losses[0]);
      expect(last[0].wireRatio).toBeLessThanOrEqual(0.3);
      g.dps.forEach((d) => d.stop());
    } finally {
      agoq.forEach((t) => t.destroy());
    }
  });

  it('the exchange is encoded behind backward and revealed after every commitment: the commitment first, then the commitment row, then the buckets tail first; weights bit-identical to the one-encode path (2 and 3 peers)', async () => {
    const bucketFloats = 2048; // several buckets, not aligned to the tensors
    for (const [n, mode] of [[2, 'fp32'], [3, 'int8']] as const) {
      const weights: Float32Array[][] = [];
      let order: number[] = [];
      let overlap: number[] = [];
      for (const streamed of [false, true]) {
        const ts = fresh(n);
        // Rank 0's all-gather frames of training step 0 (group step 1; 0 is the sync) in wire order, first frame of each message: their tags.
        const tags: number[] = [];
        const g = group(ts, mode, { bucketFloats, overlap: streamed }, (t, i) => (i === 0 ? tampering(t, (_, f) => {
          const d = decodeFrame(f, f.length);
          if (d.ok && d.frame.type === FrameType.AllGather && d.frame.step === 1 && d.frame.chunkIndex === 0 && !tags.includes(d.frame.tag)) tags.push(d.frame.tag);
          return f;
        }) : t));
        for (let s = 0; s < 2; s++) {
          const st = await stepAll(g.dps);
          await expectInStep(st, ts);
          if (streamed && s === 1) overlap = st.map((x) => x.overlapMs);
          if (!streamed) expect(st.every((x) => x.overlapMs === 0)).toBe(true);
        }
        weights.push(await Promise.all(ts.map((t) => t.model.readFlat('weights'))));
        g.dps.forEach((d) => d.stop());
        if (streamed) order = tags;
        else expect(tags.slice(0, 4)).toEqual([0, 1, 2, 3]); // the one-encode path: commitment, commitment row, the buckets in layout order
      }
      const spans = Math.ceil(fresh(1)[0].model.layout.totalFloats / bucketFloats);
      expect(spans).toBeGreaterThan(4);
      // Streamed: the commitment (tag 0) and the commitment row (1) before every bucket (tags 2..spans+1, revealed only
      // once every commitment is in); the first bucket out is one of the layout's tail, bucket 0 (the embedding) among the last.
      const buckets = order.filter((t) => t >= 2 && t <= spans + 1);
      expect(buckets.length).toBe(spans);
      expect(order.indexOf(0)).toBe(0);
      expect(order.indexOf(1)).toBeLessThan(Math.min(...buckets.map((t) => order.indexOf(t))));
      expect(buckets[0]).toBeGreaterThan(2);
      expect(buckets.indexOf(2)).toBeGreaterThan(spans / 2);
      weights[1].forEach((w, r) => expect(Buffer.from(w.buffer).equals(Buffer.from(weights[0][r].buffer)), `${n} peers ${mode}: rank ${r}`).toBe(true));
      console.log(`${n} peers ${mode}, ${spans} buckets: wire order ${order.join(' ')}; overlapMs ${overlap.map((x) => x.toFixed(1)).join(', ')}`);
      expect(overlap.every((x) => x >= 0)).toBe(true);
    }
  });

  it('2 peers with fp32 exchange train like one peer on the concatenated batch; a group of one is trainStep bit for bit; accumulation', async () => {
    const rt = await testRuntime();
    const single = await Trainer.create(rt, optsFor({ batch: 2 * B }), text, { tokenizer: tok });
    // The exchanged mean (left in the gradient buffer) is the whole batch's gradient, to fp32 rounding.
    const sameGradient = async (t: Trainer) => expectClose(await t.model.readFlat('grads'), await single.model.readFlat('grads'), { atol: 1e-6, rtol: 1e-4, label: 'gradient' });
    // Adam divides by √v, which magnifies rounding differences of near-zero gradients: after a few
    // steps the weights agree to a small fraction of one lr-sized update.
    const sameWeights = async (t: Trainer) => expectClose(await t.model.readFlat('weights'), await single.model.readFlat('weights'), { atol: 2e-4, rtol: 1e-4, label: 'weights' });
    try {
      single.restoreTrainingState(initialState());
      const ts = fresh(2);
      const g = group(ts, 'fp32');
      for (let s = 0; s < 2; s++) {
        const [a, b] = await stepAll(g.dps);
        const m = await single.trainStep();
        if (s === 0) await sameGradient(ts[0]);
        // The mean of the two shards' mean losses is the loss of the whole batch.
        expect(a.groupLoss!).toBeCloseTo(m.loss, 5);
        expect(b.loss).not.toBe(a.loss);
        expect(a.gradNorm!).toBeCloseTo(m.grad_norm, 4);
      }
      expect((await ts[0].model.readFlat('weights')).some((v, i) => Math.abs(v - initialState().weights[i]) > 1e-2)).toBe(true);
      await sameWeights(ts[0]);
      g.dps.forEach((d) => d.stop());

      // A group of one: the split step (computeGradients → read → write → applyGradients) is trainStep, bit for bit.
      const [solo, plain] = fresh(2);
      const one = new DataParallel(solo, LoopbackHub.group(1).transports[0], { run: 'one', mode: 'fp32' });
      for (let s = 0; s < 2; s++) {
        const [st, m] = [await one.step(), await plain.trainStep()];
        expect([st.loss, st.gradNorm, st.world]).toEqual([m.loss, m.grad_norm, 1]);
      }
      one.stop();
      const [a2, b2] = await Promise.all([solo.trainingState(), plain.trainingState()]);
      for (const k of ['weights', 'm', 'v'] as const) expect(Buffer.from(a2[k].buffer).equals(Buffer.from(b2[k].buffer)), k).toBe(true);

      // One peer alone, two accumulated micro-batches of B rows = the same batch of 2B rows.
      const [t] = fresh(1);
      single.restoreTrainingState(initialState());
      const { transports } = LoopbackHub.group(1);
      const alone = new DataParallel(t, transports[0], { run: 'acc', mode: 'fp32', accumulate: 2 });
      for (let s = 0; s < 2; s++) {
        const st = await alone.step();
        const m = await single.trainStep();
        if (s === 0) await sameGradient(t);
        expect(st.world).toBe(1);
        expect(st.loss!).toBeCloseTo(m.loss, 5);
      }
      await sameWeights(t);
      alone.stop();
    } finally {
      single.destroy();
    }
  });

  it('a peer that leaves mid-exchange is dropped: the step is retried without it on re-sharded data', async () => {
    const ts = fresh(3);
    let leaveAt = -1;
    // p2 disconnects (no goodbye) the moment it starts sending its gradient at step 2.
    const g: Group = group(ts, 'int8', {}, (t, i) => i !== 2 ? t : tampering(t, (_, f) => {
      const d = decodeFrame(f);
      if (leaveAt < 0 && d.ok && d.frame.type === FrameType.AllGather && d.frame.payload.length > 1000 && ts[2].stepIndex === 2) {
        leaveAt = ts[2].stepIndex;
        g.transports[2].close();
        g.dps[2].stop();
      }
      return f;
    }));
    await expectInStep(await stepAll(g.dps), ts);
    await expectInStep(await stepAll(g.dps), ts);
    const [a, b, c] = await Promise.allSettled(g.dps.map((d) => d.step()));
    expect(leaveAt).toBe(2);
    expect(c.status).toBe('rejected');
    const survivors = [a, b].map((r) => (r as PromiseFulfilledResult<DpStepStats>).value);
    await expectInStep(survivors, ts.slice(0, 2));
    expect(survivors.map((s) => [s.step, s.rank, s.world])).toEqual([[2, 0, 2], [2, 1, 2]]);
    expect(survivors[0].events.map((e) => e.kind)).toEqual(expect.arrayContaining(['fault', 'dropped', 'formed']));
    expect(survivors[0].members).toEqual(['p0', 'p1']);
    await expectInStep(await stepAll(g.dps.slice(0, 2)), ts.slice(0, 2));
    g.dps.forEach((d) => d.stop());
  });

  it('a stalled peer (connected, silent) is dropped after silenceMs; the others go on', async () => {
    const ts = fresh(3);
    let hung = false;
    const g = group(ts, 'fp32', { silenceMs: 1500 }, (t, i) => (i !== 2 ? t : tampering(t, (_, f) => (hung ? null : f))));
    await expectInStep(await stepAll(g.dps), ts);
    hung = true; // p2 neither steps nor sends anything, heartbeats included, but stays connected
    const t0 = performance.now();
    const live = await stepAll(g.dps.slice(0, 2));
    expect(performance.now() - t0).toBeGreaterThan(1500);
    expect(live.map((s) => [s.step, s.rank, s.world])).toEqual([[1, 0, 2], [1, 1, 2]]);
    expect(live[0].events.find((e) => e.kind === 'dropped')?.peers).toEqual(['p2']);
    await expectInStep(live, ts.slice(0, 2));
    g.dps.forEach((d) => d.stop());
  });

  it('a late joiner gets weights, Adam state and step the majority vouches for and trains bit-identically from the next step', async () => {
    const ts = fresh(3);
    ts[2].restoreTrainingState({ ...initialState(), weights: initialState().weights.map((v) => v * 0.5) });
    const g = group(ts.slice(0, 2), 'fp32');
    await stepAll(g.dps);
    const joinerEnd = g.hub.endpoint('p2');
    const joiner = new DataParallel(ts[2], joinerEnd, { run: 'test', mode: 'fp32', silenceMs: 5_000 });
    const joined = joiner.step();
    const admitting = await stepAll(g.dps); // step 1: p2's hello is in every report → admitted
    expect(admitting[0].world).toBe(2);
    expect(admitting[0].events.map((e) => e.kind)).toContain('admitted');
    const [a, b, c] = await Promise.all([...g.dps.map((d) => d.step()), joined]);
    expect([a, b, c].map((s) => [s.step, s.world, s.rank])).toEqual([[2, 3, 0], [2, 3, 1], [2, 3, 2]]);
    expect(c.events.map((e) => e.kind)).toContain('state-received');
    await expectInStep([a, b, c], ts);
    await expectInStep(await stepAll([...g.dps, joiner]), ts);
    const [s0, s2] = await Promise.all([ts[0].trainingState(), ts[2].trainingState()]);
    expect(s2.step).toBe(4);
    for (const k of ['weights', 'm', 'v'] as const) expect(Buffer.from(s2[k].buffer).equals(Buffer.from(s0[k].buffer)), k).toBe(true);
    [...g.dps, joiner].forEach((d) => d.stop());
  });

  it('a joiner whose hello one member missed (its driver not listening yet) says hello again until the group admits it', async () => {
    const ts = fresh(3);
    const g = group(ts.slice(0, 2), 'fp32');
    await stepAll(g.dps);
    // p1 never sees p2's first hello, as when p1 was still building its model.
    let toP1 = 0;
    const joinerEnd = tampering(g.hub.endpoint('p2'), (to, f) => (to === 'p1' && toP1++ === 0 ? null : f));
    const joiner = new DataParallel(ts[2], joinerEnd, { run: 'test', mode: 'fp32', silenceMs: 5_000, heartbeatMs: 20 });
    const joined = joiner.step();
    let admitted = false;
    for (let i = 0; i < 20 && !admitted; i++) {
      await new Promise((r) => setTimeout(r, 30)); // a heartbeat: the hello again
      admitted = (await stepAll(g.dps))[0].events.some((e) => e.kind === 'admitted');
    }
    expect(toP1, 'p2 said hello to p1 more than once').toBeGreaterThan(1);
    expect(admitted).toBe(true);
    const [a, b, c] = await Promise.all([...g.dps.map((d) => d.step()), joined]);
    expect([a, b, c].map((s) => [s.world, s.rank])).toEqual([[3, 0], [3, 1], [3, 2]]);
    // Hellos that crossed the welcome neither restart p2 nor ask again: the next steps stay at 3.
    await new Promise((r) => setTimeout(r, 60));
    const next = await stepAll([...g.dps, joiner]);
    expect(next.map((s) => s.world)).toEqual([3, 3, 3]);
    expect(next.flatMap((s) => s.events.map((e) => e.kind))).not.toContain('fault');
    await expectInStep(next, ts);
    [...g.dps, joiner].forEach((d) => d.stop());
  });

  it('a corrupted state hand-over is rejected and never applied; the group goes on without the joiner', async () => {
    const ts = fresh(3);
    let flipped = 0;
    // p0 (the source) corrupts one chunk of the state it sends p2 and re-seals the frame's checksum.
    const g = group(ts.slice(0, 2), 'fp32', {}, (t, i) => i !== 0 ? t : tampering(t, (to, f) => {
      const d = decodeFrame(f);
      if (to !== 'p2' || flipped > 0 || !d.ok || d.frame.type !== FrameType.AllToAll || d.frame.payload.length < 1000) return f;
      flipped++;
      const out = f.slice();
      out[HEADER_BYTES + 500] ^= 0x40;
      return out;
    }));
    await stepAll(g.dps);
    const before = await ts[2].trainingState();
    const joiner = new DataParallel(ts[2], g.hub.endpoint('p2'), { run: 'test', mode: 'fp32', silenceMs: 5_000 });
    const joined = joiner.step().then(() => null, (e: unknown) => e);
    await stepAll(g.dps);
    const [a, b] = await stepAll(g.dps); // p2 rejects the state, says bye; p0 and p1 regroup and train
    const err = await joined;
    expect(flipped).toBe(1);
    expect(err).toBeInstanceOf(DpError);
    expect((err as DpError).code).toBe('state-rejected');
    expect((err as DpError).message).toMatch(/from p0 rejected, nothing applied: State: checksum mismatch/);
    const after = await ts[2].trainingState();
    expect(after.step).toBe(0);
    expect(Buffer.from(after.weights.buffer).equals(Buffer.from(before.weights.buffer))).toBe(true);
    await expectInStep([a, b], ts.slice(0, 2));
    expect(a.world).toBe(2);
    await expect(joiner.step()).rejects.toThrow(/rejected/);
    g.dps.forEach((d) => d.stop());
  });

  it('peers with another configuration are refused (joining) or stop the group with a clear error (starting together)', async () => {
    const ts = fresh(3);
    const g = group(ts.slice(0, 2), 'fp32');
    const other = new DataParallel(ts[2], g.hub.endpoint('p2'), { run: 'test', mode: 'int8', silenceMs: 5_000 });
    await expect(other.step()).rejects.toMatchObject({ code: 'refused', peers: [expect.stringMatching(/^p[01]$/)] });
    g.dps.forEach((d) => d.stop());

    const { transports } = LoopbackHub.group(2);
    const pair = [0, 1].map((i) => new DataParallel(ts[i], transports[i], { run: 'test', mode: i ? 'int8' : 'fp32', members: ['p0', 'p1'], silenceMs: 5_000 }));
    const res = await Promise.allSettled(pair.map((d) => d.step()));
    for (const r of res) {
      expect(r.status).toBe('rejected');
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 'config-mismatch' });
    }
    expect((res[0] as PromiseRejectedResult).reason.message).toMatch(/p1 trains with another configuration/);
    expect(ts[0].stepIndex).toBe(0);
  });

  it('a diverged peer is judged by majority: it stops, named; the majority removes it and goes on', async () => {
    const ts = fresh(3);
    const g = group(ts, 'int8');
    await stepAll(g.dps);
    const w = await ts[1].model.readFlat('weights');
    w[100] += 1e-3;
    ts[1].model.uploadParams(w);
    const [a, b, c] = await Promise.allSettled(g.dps.map((d) => d.step()));
    expect(b.status).toBe('rejected');
    const e = (b as PromiseRejectedResult).reason as DpError;
    expect(e).toBeInstanceOf(DpError);
    expect(e.code).toBe('diverged');
    expect(e.step).toBe(1);
    expect(e.peers).toEqual(['p1']);
    expect(e.message).toMatch(/weights differ after step 1 .*on p0, p2; crc32 0x[0-9a-f]{8} on p1\. The majority holds another state/);
    for (const r of [a, c]) {
      expect(r.status).toBe('fulfilled');
      const st = (r as PromiseFulfilledResult<DpStepStats>).value;
      expect(st.events.find((x) => x.kind === 'removed')?.peers).toEqual(['p1']);
    }
    const next = await stepAll([g.dps[0], g.dps[2]]);
    expect(next.map((x) => x.members)).toEqual([['p0', 'p2'], ['p0', 'p2']]);
    await expectInStep(next, [ts[0], ts[2]]);
    await expect(g.dps[1].step()).rejects.toBeInstanceOf(DpError);
    [g.dps[0], g.dps[2]].forEach((d) => d.stop());
  });

  it('the group saves a checkpoint and resumes from it bit-identically (one peer loads it, the other receives it)', async () => {
    const rt = await testRuntime();
    const ts = fresh(2);
    const g = group(ts, 'int8');
    await stepAll(g.dps);
    await stepAll(g.dps);
    const files = await g.dps[1].checkpoint();
    const ref = await stepAll(g.dps);
    g.dps.forEach((d) => d.stop());

    const ck = loadCheckpoint({ ...files });
    const resumed = await Trainer.create(rt, optsFor(), text, { tokenizer: tok, params: ck.params, optimizer: ck.extra!.optimizer });
    try {
      const other = fresh(1)[0];
      const h = group([resumed, other], 'int8');
      const st = await stepAll(h.dps);
      expect(st.map((s) => s.step)).toEqual([2, 2]);
      expect(st[1].events.map((e) => e.kind)).toContain('state-received');
      expect(st[0].weightsHash).toBe(ref[0].weightsHash);
      expect(st[0].groupLoss).toBe(ref[0].groupLoss);
      await expectInStep(st, [resumed, other]);
      h.dps.forEach((d) => d.stop());
    } finally {
      resumed.destroy();
    }
  });
});
