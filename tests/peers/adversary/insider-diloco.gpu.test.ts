/**
 * An insider in a DiLoCo group with the INT8 wire (issue 38): two honest DiLoCo members (micro on
 * one Dawn device, loopback, H = 1) start with an insider written from the protocol (insider.ts;
 * the INT8 chunk is one fp32 LE scale per 256 values, absmax / 127, then the int8 codes). It copies
 * an honest STATUS at the sync, then commits blind at every outer step to:
 *  - per-block scales that are huge but finite, at the codec's largest, then NaN and Inf: screened
 *    (norm), screened, a malformed-contribution fault — named and removed;
 *  - pseudo-gradients sign-flipped from the honest mean it saw last (−k ×, k as large as the
 *    pairwise screen lets pass against the Δs it saw), which only the held-out check (src/parallel/diloco/held-out.ts) sees: left
 *    out, accused by both honest members, removed after `strikes` outer steps by their accusations.
 * Either way the honest members end with θ_global and loss bit-identical to the two of them alone.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { DiLoCo, type DilocoConfig } from '../../../src/parallel/diloco/diloco';
import type { DpEvent } from '../../../src/parallel/dp/dp';
import { LoopbackHub } from '../../../src/peers/transport/loopback';
import type { Trainer } from '../../../src/engine/train/trainer';
import { microTrainerPool } from '../../helpers/trainer-pool';
import { dp, FRAME, Insider } from './insider';

const { fresh } = microTrainerPool(2, 300_000);
const H = 1;
const BLOCK = 256;
const live: DiLoCo[] = [];
afterAll(() => live.forEach((d) => (d.stop('test done'), d.destroy())));

/** The INT8 chunk from the protocol: ⌈n/256⌉ fp32 LE scales, then n int8 codes. */
const int8 = {
  raw(scales: number[], codes: Int8Array): Uint8Array {
    const out = new Uint8Array(4 * scales.length + codes.length);
    const dv = new DataView(out.buffer);
    scales.forEach((s, k) => dv.setFloat32(4 * k, s, true));
    out.set(new Uint8Array(codes.buffer, codes.byteOffset, codes.length), 4 * scales.length);
    return out;
  },
  encode(x: Float32Array): Uint8Array {
    const nb = Math.ceil(x.length / BLOCK);
    const scales: number[] = [];
    const codes = new Int8Array(x.length);
    for (let k = 0; k < nb; k++) {
      let m = 0;
      for (let i = k * BLOCK; i < Math.min(x.length, (k + 1) * BLOCK); i++) m = Math.max(m, Math.abs(x[i]));
      const s = m / 127;
      scales.push(s);
      for (let i = k * BLOCK; i < Math.min(x.length, (k + 1) * BLOCK); i++) codes[i] = s > 0 ? Math.max(-127, Math.min(127, Math.round(x[i] / s))) : 0;
    }
    return int8.raw(scales, codes);
  },
  decode(b: Uint8Array, n: number): Float32Array {
    const nb = Math.ceil(n / BLOCK);
    const dv = new DataView(b.buffer, b.byteOffset);
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = dv.getInt8(4 * nb + i) * dv.getFloat32(4 * Math.floor(i / BLOCK), true);
    return out;
  },
};

/** The run: p0, p1 honest, p2 the insider; returns the honest members' last losses, outer hashes, events and members. */
async function attacked(run: string, outer: number, diloco: DilocoConfig, mine: (step: number, last: Float32Array[] | null, n: number) => Uint8Array | null) {
  const ts: Trainer[] = fresh(2);
  const hub = new LoopbackHub();
  const ev = new Insider(hub.endpoint('p2'));
  const events: DpEvent[][] = [[], []];
  const opts = { run, mode: 'fp32' as const, silenceMs: 30_000, diloco };
  const ds = ts.map((t, i) => new DiLoCo(t, hub.endpoint(`p${i}`), { ...opts, members: ['p0', 'p1', 'p2'], onEvent: (e) => events[i].push(e) }));
  live.push(...ds);
  const n = ts[0].model.layout.totalFloats; // the run's model, which an insider builds too
  const all = ['p0', 'p1', 'p2'];
  const insider = (async () => {
    const id = dp.runId(run, 1);
    // The sync (group step 0: status at tag 0, its echo at tag 1): p0's status signed as its own.
    const got = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, 0, 0, 120_000)));
    const st = ev.statement('status', id, 0, all, got[0].subarray(0, got[0].length - 96));
    for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 0, st);
    for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, 0, 1, Insider.echo([...got, st]));
    let last: Float32Array[] | null = null;
    for (let gstep = 1; ; gstep++) {
      // One outer exchange: commitment (tag 0), row (1), the Δ (2), echo (3); then the report (5) and its echo (6), copied from p0's.
      const c = mine(gstep, last, n);
      if (!c) return;
      const commits = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 0, 120_000)));
      const cm = ev.commitment(Insider.context(id, gstep, 0, all), c);
      const row = Insider.row([Insider.slot(commits[0]), Insider.slot(commits[1]), Insider.slot(cm)]);
      for (const p of ['p0', 'p1']) [[0, cm], [1, row], [2, c]].forEach(([tag, b]) => ev.send(p, FRAME.allGather, id, gstep, tag as number, b as Uint8Array));
      last = (await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 2)))).map((b) => int8.decode(b, n));
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 3, row);
      const reps = await Promise.all(['p0', 'p1'].map((p) => ev.recv(p, id, gstep, 5)));
      const rep = ev.statement('report', id, gstep, all, reps[0].subarray(0, reps[0].length - 96));
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 5, rep);
      for (const p of ['p0', 'p1']) ev.send(p, FRAME.allGather, id, gstep, 6, Insider.echo([...reps, rep]));
    }
  })();
  let insiderError: unknown = null;
  insider.catch((e: unknown) => (insiderError = e)); // once removed it hears nothing more: not awaited
  let loss: (number | null)[] = [];
  for (let s = 0; s < outer * H; s++) loss = (await Promise.all(ds.map((d) => d.step()))).map((x) => x.loss);
  const hashes = await Promise.all(ds.map((d) => d.outerHash()));
  if (insiderError) throw insiderError as Error;
  ds.forEach((d) => d.stop('attacked run done'));
  return { loss, hashes, events, members: ds.map((d) => d.dp.currentMembers) };
}

/** The honest pair alone, the same configuration: the losses and outer hash the attacked run must end with. */
async function alone(run: string, outer: number, diloco: DilocoConfig) {
  const ts = fresh(2);
  const ref = LoopbackHub.group(2);
  const ds = ts.map((t, i) => new DiLoCo(t, ref.transports[i], { run, mode: 'fp32', silenceMs: 30_000, members: ['p0', 'p1'], diloco }));
  live.push(...ds);
  let loss: (number | null)[] = [];
  for (let s = 0; s < outer * H; s++) loss = (await Promise.all(ds.map((d) => d.step()))).map((x) => x.loss);
  const hash = await ds[0].outerHash();
  ds.forEach((d) => d.stop('reference done'));
  return { loss, hash };
}

const kinds = (e: DpEvent[], k: string) => e.filter((x) => x.kind === k);

describe('an insider in a DiLoCo group, INT8 wire', () => {
  it('huge finite, largest-allowed, then NaN / Inf per-block scales: screened, named, removed; θ_global and loss equal the honest pair alone', async () => {
    // One held-out batch: the check runs (nothing of the insider reaches it), at a quarter of the default's forwards.
    const diloco: DilocoConfig = { innerSteps: H, wire: 'int8', heldOutBatches: 1 };
    const want = await alone('dl-i8-scales', 3, diloco);
    const got = await attacked('dl-i8-scales', 3, diloco, (step, _last, n) => {
      const nb = Math.ceil(n / BLOCK);
      const codes = new Int8Array(n).fill(step === 2 ? -128 : 127);
      if (step === 1) return int8.raw(new Array<number>(nb).fill(1e30), codes);
      if (step === 2) return int8.raw(new Array<number>(nb).fill(3.4028234663852886e38 / 128), codes);
      if (step === 3) return int8.raw(new Array<number>(nb).fill(0.01).map((s, k) => (k === 0 ? NaN : k === 1 ? Infinity : s)), codes);
      return null;
    });
    expect(got.hashes).toEqual([want.hash, want.hash]);
    expect(got.loss).toEqual(want.loss);
    for (const e of got.events) {
      expect(kinds(e, 'screened').map((x) => x.peers[0])).toEqual(['p2', 'p2', 'p2']);
      expect(kinds(e, 'screened').map((x) => x.message).join('\n')).toMatch(/norm [\s\S]*norm [\s\S]*malformed contribution: .*bad scale NaN/);
      expect(kinds(e, 'removed').map((x) => x.peers)).toEqual([['p2']]);
    }
    expect(got.members).toEqual([['p0', 'p1'], ['p0', 'p1']]);
  }, 120_000);

  it('−k × the honest mean it saw last (sign-flipped, k just inside the pairwise screen): the held-out check leaves it out, both accuse, removed at the third', async () => {
    // Two held-out batches: with one, the third flip's rise is within the bound (noise at 32 tokens a batch).
    const diloco: DilocoConfig = { innerSteps: H, wire: 'int8', heldOutBatches: 2 };
    const want = await alone('dl-i8-flip', 4, diloco);
    const got = await attacked('dl-i8-flip', 4, diloco, (step, last, n) => {
      // Outer step 1: nothing seen yet — a huge Δ (norm-screened); then three sign flips.
      if (step === 1) return int8.raw(new Array<number>(Math.ceil(n / BLOCK)).fill(1e30), new Int8Array(n).fill(127));
      if (step > 4 || !last) return null;
      // −k × the mean it saw, k as large as the pairwise screen lets pass against those Δs (projection −1.8 > −2).
      const mean = last[0].map((v, i) => (v + last[1][i]) / 2);
      const dot = (x: Float32Array, y: Float32Array) => x.reduce((a, v, i) => a + v * y[i], 0);
      const k = 1.8 / Math.max(...last.map((d) => dot(mean, d) / dot(d, d)));
      return int8.encode(mean.map((v) => -k * v));
    });
    expect(got.hashes).toEqual([want.hash, want.hash]);
    expect(got.loss).toEqual(want.loss);
    for (const e of got.events) {
      const held = kinds(e, 'screened').filter((x) => /held-out loss/.test(x.message));
      expect(held.map((x) => x.peers[0])).toEqual(['p2', 'p2', 'p2']);
      expect(kinds(e, 'removed').map((x) => x.peers)).toEqual([['p2']]);
      expect(kinds(e, 'removed').flatMap((x) => x.peers)).not.toContain('p0');
      expect(kinds(e, 'removed').flatMap((x) => x.peers)).not.toContain('p1');
    }
    expect(got.members).toEqual([['p0', 'p1'], ['p0', 'p1']]);
  }, 240_000);
});
