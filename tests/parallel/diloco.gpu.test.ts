/**
 * DiLoCo and streaming DiLoCo end to end on one Dawn device: micro trainers (batch 2 × 16) in one
 * process, each behind a loopback endpoint (some behind the link limiter) and a DiLoCo driver.
 */
import { describe, expect, it } from 'vitest';
import { inMemoryData } from '../../src/engine/train/data/data';
import { DiLoCo, type DilocoConfig, type DilocoStepStats, resolveDiloco } from '../../src/parallel/diloco/diloco';
import { decodeOuterCheckpoint, encodeOuterCheckpoint, fragmentsOf, outerHash } from '../../src/parallel/diloco/outer';
import { allReduceWireBytes } from '../../src/peers/collectives/allreduce';
import { limitTransport } from '../../src/peers/transport/limiter';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import type { Transport } from '../../src/peers/transport/transport';
import { outerDispatches } from '../../src/engine/optim/outer';
import { outerDeltaRef, outerStepRef } from '../../src/engine/optim/outer.ref';
import { type FlatTrainingState, Trainer } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { microTrainerPool } from '../helpers/trainer-pool';

const { B, pool, initial: initialState, fresh } = microTrainerPool(3, 300_000);

const live: DiLoCo[] = [];
// The held-out check runs as in the product, on one held-out batch: its own tests
// (tests/peers/adversary/insider-diloco.gpu.test.ts) judge it; here it only must not change the means.
const ONE_BATCH = { heldOutBatches: 1 };
function group(trainers: Trainer[], diloco: DilocoConfig, wrap: (t: Transport) => Transport = (t) => t) {
  const { hub, transports } = LoopbackHub.group(trainers.length);
  const links = transports.map(wrap);
  const members = links.map((t) => t.id);
  const ds = trainers.map((t, i) => new DiLoCo(t, links[i], { run: 'diloco-test', mode: 'fp32', members, silenceMs: 10_000, diloco: { ...ONE_BATCH, ...diloco } }));
  live.push(...ds);
  return { hub, ds };
}
const stepAll = (ds: DiLoCo[]) => Promise.all(ds.map((d) => d.step()));
function done(): void {
  for (const d of live.splice(0)) {
    d.stop('test done');
    d.destroy();
  }
}
const bitsEqual = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('outer step on the GPU', () => {
  it('delta and Nesterov apply equal the reference bit for bit (α = 0 and α = 0.5) on a fragment', async () => {
    const rt = await testRuntime();
    const rng = new Rng(3);
    const total = 1000;
    const [off, n] = [128, 700];
    const rand = () => Float32Array.from({ length: total }, () => rng.normal() * 0.1);
    for (const alpha of [0, 0.5]) {
      const w = rand();
      const global = rand();
      const momentum = rand();
      const mean = Float32Array.from({ length: n }, () => rng.normal() * 0.01);
      const bufs = [w, global, momentum].map((a) => rt.upload('workspace', 't', a));
      const d = rt.createBuffer('workspace', 'd', n * 4);
      const hyper = { lr: 0.7, momentum: 0.9, alpha };
      const k = outerDispatches(rt, { label: 't', w: bufs[0], global: bufs[1], momentum: bufs[2], d, off, n, hyper });
      rt.run([k.delta]);
      expect(bitsEqual(await rt.readF32(d, 0, n), outerDeltaRef(global, w, off, n))).toBe(true);
      rt.write(d, mean);
      rt.run([k.apply]);
      const ref = { w: w.slice(), global: global.slice(), momentum: momentum.slice() };
      outerStepRef(ref, mean, hyper, off);
      const got = await Promise.all(bufs.map((b) => rt.readF32(b, 0, total)));
      expect(bitsEqual(got[0], ref.w), 'w').toBe(true);
      expect(bitsEqual(got[1], ref.global), 'global').toBe(true);
      expect(bitsEqual(got[2], ref.momentum), 'momentum').toBe(true);
      [...bufs, d].forEach((b) => rt.mem.free(b));
    }
  });
});

describe('DiLoCo over loopback', () => {
  it('3 members stay bit-identical in θ_global and momentum at every outer step (INT8 wire)', async () => {
    const ts = fresh(3);
    const { ds } = group(ts, { innerSteps: 2, wire: 'int8' });
    const before = await ds[0].outerHash();
    const hashes: number[] = [];
    for (let i = 0; i < 6; i++) {
      const st = await stepAll(ds);
      if ((i + 1) % 2 === 0) {
        const h = await Promise.all(ds.map((d) => d.outerHash()));
        expect(new Set(h).size).toBe(1);
        expect(st.map((s) => s.weightsHash)).toEqual([h[0], h[0], h[0]]);
        hashes.push(h[0]);
        // Plain DiLoCo: every member's weights are θ_global after the outer step.
        const [w0, w2] = await Promise.all([ts[0].model.readFlat('weights'), ts[2].model.readFlat('weights')]);
        expect(bitsEqual(w0, w2)).toBe(true);
      } else {
        expect(st.every((s) => s.exchangeBytesSent === 0 && s.weightsHash === null)).toBe(true);
        // Inner steps are each member's own: the shards differ, so the local weights do too.
        const [w0, w1] = await Promise.all([ts[0].model.readFlat('weights'), ts[1].model.readFlat('weights')]);
        expect(bitsEqual(w0, w1)).toBe(false);
      }
    }
    expect(new Set([before, ...hashes]).size).toBe(4);
    expect(ds.map((d) => d.outerStepCount)).toEqual([3, 3, 3]);
    done();
  });

  it('a member that reaches the outer exchange long before the other: its frames wait, nothing is refused', async () => {
    const ts = fresh(2);
    const rejects: string[] = [];
    const { transports } = LoopbackHub.group(2);
    const members = transports.map((t) => t.id);
    const ds = ts.map((t, i) => new DiLoCo(t, transports[i], {
      run: 'diloco-test', mode: 'fp32', members, silenceMs: 10_000, diloco: { ...ONE_BATCH, innerSteps: 4, wire: 'int8' },
      onEvent: (e) => e.kind === 'reject' && rejects.push(e.message),
    }));
    live.push(...ds);
    await stepAll(ds); // step 0 forms the group
    const steps = async (d: DiLoCo) => {
      for (let i = 1; i < 8; i++) await d.step();
    };
    const first = steps(ds[0]);
    await new Promise((r) => setTimeout(r, 1500)); // p0 sends its outer exchange while p1 is still at step 1
    await Promise.all([first, steps(ds[1])]);
    expect(rejects).toEqual([]);
    const h = await Promise.all(ds.map((d) => d.outerHash()));
    expect(h[0]).toBe(h[1]);
    expect(ds.map((d) => d.outerStepCount)).toEqual([2, 2]);
    done();
  });

  it('H = 1, outer lr 1, momentum 0, fp32: θ_global is the fp32 mean of the members\' own AdamW steps from the common θ', async () => {
    // With H = 1, lr = 1, μ = 0 the outer step is θ − mean_r(θ − θ_r): per-step model averaging of
    // one local AdamW step per member (own moments, own rows). For a plain SGD inner optimizer this
    // is per-step data parallel of the averaged gradient; with AdamW it is the average of the steps.
    const ts = fresh(2);
    const ref = pool[2];
    ref.restoreTrainingState(initialState());
    const { ds } = group(ts, { innerSteps: 1, wire: 'fp32', outerLr: 1, outerMomentum: 0 });
    const refStates: FlatTrainingState[] = [initialState(), initialState()].map((s) => ({ ...s, m: s.m.slice(), v: s.v.slice() }));
    let theta = initialState().weights.slice();
    let mom = new Float32Array(theta.length);
    for (let s = 0; s < 3; s++) {
      await stepAll(ds);
      // Reference: each member's AdamW step from θ on its rows, on one trainer in turn.
      const locals: Float32Array[] = [];
      for (let r = 0; r < 2; r++) {
        ref.restoreTrainingState({ ...refStates[r], weights: theta, step: s });
        await ref.computeGradients(inMemoryData(ref.data).rows(s, 16, 'train', r * B, (r + 1) * B));
        await ref.applyGradients();
        const st = await ref.trainingState();
        refStates[r] = st;
        locals.push(st.weights);
      }
      const deltas = locals.map((w) => outerDeltaRef(theta, w));
      const mean = new Float32Array(theta.length);
      for (let i = 0; i < mean.length; i++) mean[i] = (deltas[0][i] + deltas[1][i]) / 2; // fp64 sum / N, as the fp32 all-reduce
      const st = { w: theta.slice(), global: theta.slice(), momentum: mom };
      outerStepRef(st, mean, { lr: 1, momentum: 0, alpha: 0 });
      theta = st.global;
      mom = st.momentum;
      const got = await ds[0].outer.read();
      expect(bitsEqual(got.global, theta), `step ${s}`).toBe(true);
      expect(bitsEqual(got.momentum, mom)).toBe(true);
    }
    done();
  });

  it('INT8 / INT4 pseudo-gradients: bytes per trained token against per-step fp32 data parallel', async () => {
    const H = 4;
    const n = pool[0].model.layout.totalFloats;
    const ratios: Record<string, number> = {};
    for (const wire of ['fp32', 'int8', 'int4'] as const) {
      const ts = fresh(2);
      const { ds } = group(ts, { innerSteps: H, wire });
      let sent = 0;
      let fp32 = 0;
      for (let i = 0; i < H; i++) {
        const st = await stepAll(ds);
        sent += st[0].exchangeBytesSent;
        fp32 += st[0].fp32ExchangeBytes;
      }
      // One outer exchange of the whole model per H steps: exactly the all-reduce's formula (the
      // group counts its own frames, not the transport's heartbeats).
      expect(sent).toBe(allReduceWireBytes(n, 2, 0, wire));
      expect(fp32).toBe(allReduceWireBytes(n, 2, 0, 'fp32'));
      // Per-step DP with fp32 sends fp32's bytes every step for the same tokens (B rows per member per step).
      ratios[wire] = (H * allReduceWireBytes(n, 2, 0, 'fp32')) / sent;
      done();
    }
    expect(ratios.fp32).toBeCloseTo(H, 5);
    expect(ratios.int8).toBeGreaterThan(H * 3.8);
    expect(ratios.int4).toBeGreaterThan(H * 7);
    console.log(`bytes per trained token, per-step fp32 DP / DiLoCo H=${H}: ${JSON.stringify(ratios)}`);
  });

  it('streaming: fragments sync on a rotation, overlapped; less exposed wait than plain DiLoCo over a 20 MB/s, 50 ms link', async () => {
    // H = 4, F = 2: fragment k starts after every 2nd step and lands τ = 1 step later, by which
    // time its two-phase exchange (≈ 2 × 50 ms) is done (a micro step takes ~1 s here); plain DiLoCo
    // waits for the exchange and its report.
    const [H, tau] = [4, 1];
    const link = { bytesPerSecond: 20e6, latencyMs: 50 };
    const waits: Record<string, number> = {};
    for (const fragments of [1, 2]) {
      const ts = fresh(2);
      const { ds } = group(ts, { innerSteps: H, wire: 'int8', fragments, overlap: fragments > 1 ? tau : 0 }, (t) => limitTransport(t, link));
      let wait = 0;
      const landed: (number | null)[] = [];
      for (let i = 0; i < 3 * H; i++) {
        const st: DilocoStepStats[] = await stepAll(ds);
        if (i >= H) wait += st[0].waitMs; // the first round includes forming the group
        landed.push(st[0].fragment);
        if (st[0].weightsHash !== null) {
          const h = await Promise.all(ds.map((d) => d.outerHash()));
          expect(h[0]).toBe(h[1]);
          expect(st[1].weightsHash).toBe(h[0]);
        }
      }
      // Streaming: the first fragment starts after step H/F − 1 and lands τ steps later, then one every H/F steps, fragments in turn.
      const [per, first] = [H / 2, H / 2 - 1 + tau];
      const want = landed.map((_, i) => (fragments === 1
        ? ((i + 1) % H === 0 ? 0 : null)
        : (i >= first && (i - first) % per === 0 ? ((i - first) / per) % 2 : null)));
      expect(landed).toEqual(want);
      waits[fragments] = wait;
      done();
    }
    console.log(`exposed network wait over ${2 * H} inner steps: plain ${waits[1].toFixed(1)} ms, streaming ${waits[2].toFixed(1)} ms`);
    expect(waits[2]).toBeLessThan(waits[1]);
  }, 300_000);

  it('a late joiner admitted at an outer boundary receives θ_global, the momentum and Adam state', async () => {
    const ts = fresh(3);
    const { hub, ds } = group(ts.slice(0, 2), { innerSteps: 2, wire: 'int8' });
    await stepAll(ds);
    await stepAll(ds); // outer step 1
    const joiner = new DiLoCo(ts[2], hub.endpoint('p2'), { run: 'diloco-test', mode: 'fp32', silenceMs: 10_000, diloco: { ...ONE_BATCH, innerSteps: 2, wire: 'int8' } });
    live.push(joiner);
    const joined = joiner.step();
    await stepAll(ds);
    const admitting = await stepAll(ds); // outer step 2: p2's hello in every report → admitted, the group forms at once
    expect(admitting[0].events.map((e) => e.kind)).toContain('admitted');
    const first = await joined; // the joiner's first inner step, from the group's state
    expect(first.step).toBe(4);
    const [h0, h2] = await Promise.all([ds[0].outerHash(), joiner.outerHash()]);
    expect(h2).toBe(h0);
    expect(joiner.outerStepCount).toBe(ds[0].outerStepCount);
    const all = [...ds, joiner];
    const [a, b] = await Promise.all([ds[0].step(), ds[1].step()]);
    expect([first.world, a.world, b.world]).toEqual([3, 3, 3]);
    const st = await stepAll(all); // outer step 3 with three members
    const h = await Promise.all(all.map((d) => d.outerHash()));
    expect(new Set(h).size).toBe(1);
    expect(st.map((s) => s.weightsHash)).toEqual([h[0], h[0], h[0]]);
    done();
  });

  it('checkpoint round trip of the outer state; a damaged one is refused', async () => {
    const ts = fresh(2);
    const { ds } = group(ts, { innerSteps: 2, wire: 'int4' });
    for (let i = 0; i < 4; i++) await stepAll(ds);
    const files = await ds[0].checkpoint();
    const want = await ds[0].outerHash();
    done();
    const other = fresh(1)[0];
    const d = new DiLoCo(other, LoopbackHub.group(1).transports[0], { run: 'x', mode: 'fp32', diloco: { innerSteps: 2, wire: 'int4' } });
    live.push(d);
    expect(await d.outerHash()).not.toBe(want);
    d.restoreOuter(files['outer.safetensors']);
    expect(await d.outerHash()).toBe(want);
    expect(d.outerStepCount).toBe(2);
    const total = other.model.layout.totalFloats;
    const s = decodeOuterCheckpoint(files['outer.safetensors'], total);
    expect(outerHash(s.global, s.momentum)).toBe(want);
    expect(() => d.restoreOuter(encodeOuterCheckpoint({ ...s, global: s.global.subarray(1) }))).toThrow(/global must be F32/);
    const nan = s.momentum.slice();
    nan[5] = NaN;
    expect(() => d.restoreOuter(encodeOuterCheckpoint({ ...s, momentum: nan }))).toThrow(/non-finite/);
    expect(await d.outerHash()).toBe(want); // nothing applied
    done();
  });
});

describe('DiLoCo configuration', () => {
  it('defaults and validation', () => {
    expect(resolveDiloco({ innerSteps: 50, wire: 'int8' })).toMatchObject({ outerLr: 0.7, outerMomentum: 0.9, fragments: 1, overlap: 0, alpha: 0 });
    expect(resolveDiloco({ innerSteps: 50, wire: 'int4', fragments: 5 })).toMatchObject({ overlap: 1, alpha: 0.5 });
    expect(() => resolveDiloco({ innerSteps: 0, wire: 'int8' })).toThrow(/H must be/);
    expect(() => resolveDiloco({ innerSteps: 10, wire: 'int8', fragments: 3 })).toThrow(/multiple/);
    expect(() => resolveDiloco({ innerSteps: 10, wire: 'int8', fragments: 2, overlap: 5 })).toThrow(/overlap/);
    expect(() => resolveDiloco({ innerSteps: 10, wire: 'fp16' as never })).toThrow(/wire/);
    expect(() => resolveDiloco({ innerSteps: 10, wire: 'int8', outerMomentum: 1 })).toThrow(/momentum/);
  });

  it('fragments are whole layers covering the flat layout', () => {
    const layout = pool[0].model.layout;
    const f = fragmentsOf(layout, 2);
    expect(f[0].off).toBe(0);
    expect(f[0].off + f[0].n).toBe(f[1].off);
    expect(f[1].off + f[1].n).toBe(layout.totalFloats);
    expect(f[1].first).toMatch(/layers\.1\./);
    expect(() => fragmentsOf(layout, 3)).toThrow(/3 fragments/);
  });
});
