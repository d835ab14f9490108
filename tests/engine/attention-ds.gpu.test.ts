/**
 * The stored-dS attention backward (attention-ds.ts): the dK/dV pass stores dS, dq comes from it.
 * Checked against the float64 reference and against the recompute path (dk/dv bit-identical: the
 * same kernels, plus the dS stores), over GQA, T off the tiles, D not a multiple of 4, every dK/dV
 * kernel kind, several dq-from-dS tiles, chunked dS and the fallback.
 */
import { describe, expect, it } from 'vitest';
import {
  attentionBackward, attentionBackwardWorkspaceBytes, attentionDqPlan, attentionForward, type AttnTile, MEASURED_ATTENTION_TILES,
} from '../../src/engine/kernels/attention/attention';
import {
  chooseDqDsTile, DQDS_CANDIDATES, dqDsTileName, dqDsTileProblem, type DqDsTile, dsChunks, dsPairBytes,
} from '../../src/engine/kernels/attention/ds';
import { dqFromDsRef, dsHeadFloats, dsRowStart, storedDsRef } from '../../src/engine/kernels/attention/ds.ref';
import { attentionBackwardRef } from '../../src/engine/kernels/attention/attention.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { attentionTestRuntime } from '../helpers/gpu';

const testRuntime = attentionTestRuntime;

interface Shape { B: number; T: number; nH: number; nKV: number; D: number }
interface Opts { dkdv?: AttnTile; dqDs?: DqDsTile; scratchPairs?: number }

/** Forward, then the recompute and the stored-dS backward on the same inputs; everything read back. */
async function runBoth(s: Shape, seed: number, o: Opts = {}) {
  const rt = await testRuntime();
  const rng = new Rng(seed);
  const nq = s.B * s.T * s.nH * s.D;
  const nk = s.B * s.T * s.nKV * s.D;
  const host = { q: rng.normalArray(nq), k: rng.normalArray(nk), v: rng.normalArray(nk), dO: rng.normalArray(nq) };
  const G = s.nH / s.nKV;
  const pairs = o.scratchPairs ?? s.B * s.nKV;
  const bufs = {
    q: rt.upload('activations', 'q', host.q), k: rt.upload('activations', 'k', host.k),
    v: rt.upload('activations', 'v', host.v), dO: rt.upload('activations', 'dO', host.dO),
    o: rt.createBuffer('activations', 'o', nq * 4), lse: rt.createBuffer('activations', 'lse', s.B * s.nH * s.T * 4),
    dq: rt.createBuffer('grads', 'dq', nq * 4), dk: rt.createBuffer('grads', 'dk', nk * 4), dv: rt.createBuffer('grads', 'dv', nk * 4),
    ws: rt.createBuffer('workspace', 'di', attentionBackwardWorkspaceBytes(s.B, s.T, s.nH)),
    scratch: rt.createBuffer('workspace', 'dS', Math.max(16, Math.floor(pairs * dsPairBytes(s.T, G) / 4) * 4)),
  };
  const { q, k, v, dO, lse, dq, dk, dv } = bufs;
  rt.run(attentionForward(rt, { label: 't', q, k, v, o: bufs.o, lse, ...s }));
  const common = { label: 't', q, k, v, o: bufs.o, lse, dO, dq, dk, dv, workspace: bufs.ws, ...s };
  const read = async () => ({ dq: await rt.readF32(dq, 0, nq), dk: await rt.readF32(dk, 0, nk), dv: await rt.readF32(dv, 0, nk) });
  rt.run(attentionBackward(rt, { ...common, tiles: { dkdv: o.dkdv }, dqPath: 'recompute' }));
  const old = await read();
  // NaN in every output, so a gradient the stored path leaves unwritten cannot pass as the old one.
  // The scratch too: keys past t that a writer leaves alone must not reach dq.
  for (const [buf, n] of [[dq, nq], [dk, nk], [dv, nk], [bufs.scratch, bufs.scratch.size / 4]] as const) rt.write(buf, new Float32Array(n).fill(NaN));
  const args = { ...common, dsScratch: bufs.scratch, tiles: { dkdv: o.dkdv, dqDs: o.dqDs } };
  const plan = attentionDqPlan(rt, args);
  rt.run(attentionBackward(rt, { ...args, dqPath: 'stored' }));
  const stored = await read();
  const dS = await rt.readF32(bufs.scratch, 0, bufs.scratch.size / 4);
  const out = { host, o: await rt.readF32(bufs.o, 0, nq), lse: await rt.readF32(lse, 0, s.B * s.nH * s.T), old, stored, dS, plan };
  for (const b of Object.values(bufs)) rt.mem.free(b);
  return out;
}

async function check(s: Shape, seed: number, o: Opts = {}) {
  const g = await runBoth(s, seed, o);
  const tag = `B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}`;
  expect(g.plan.path).toBe('stored');
  const rb = attentionBackwardRef(g.host.q, g.host.k, g.host.v, g.o, g.lse, g.host.dO, s.B, s.T, s.nH, s.nKV, s.D);
  expectClose(g.stored.dq, rb.dq, { atol: 1e-4, rtol: 1e-3, label: `${tag} dq vs ref` });
  expectClose(g.stored.dk, rb.dk, { atol: 1e-4, rtol: 1e-3, label: `${tag} dk vs ref` });
  expectClose(g.stored.dv, rb.dv, { atol: 1e-4, rtol: 1e-3, label: `${tag} dv vs ref` });
  expectClose(g.stored.dq, g.old.dq, { atol: 1e-6, rtol: 1e-5, label: `${tag} dq vs recompute` });
  expect(Array.from(g.stored.dk), `${tag} dk bit-identical`).toEqual(Array.from(g.old.dk));
  expect(Array.from(g.stored.dv), `${tag} dv bit-identical`).toEqual(Array.from(g.old.dv));
  // The last chunk's dS is what the scratch holds at the end.
  const last = g.plan.chunks[g.plan.chunks.length - 1];
  const ds = storedDsRef(g.host.q, g.host.k, g.host.v, g.o, g.lse, g.host.dO, s.B, s.T, s.nH, s.nKV, s.D, last.pair0, last.pairs);
  const got = g.dS.slice(0, ds.length);
  // Keys past t in a row's last vec4: 0 from the blocked writers, unwritten (NaN here) from the row one.
  for (let head = 0; head < last.pairs * s.nH / s.nKV; head++) {
    for (let t = 0; t < s.T; t++) {
      const row = head * dsHeadFloats(s.T) + 4 * dsRowStart(t);
      for (let j = t + 1; j < 4 * Math.ceil((t + 1) / 4); j++) {
        if (o.dkdv?.blocked) expect(got[row + j] === 0, `padding at ${row + j}`).toBe(true); // ±0
        got[row + j] = 0;
      }
    }
  }
  expectClose(got, ds, { atol: 1e-5, rtol: 1e-4, label: `${tag} stored dS` });
  return g;
}

describe('stored-dS layout and chunks (CPU)', () => {
  it('rows of ceil((t+1)/4) vec4s, packed', () => {
    let at = 0;
    for (let t = 0; t < 40; t++) {
      expect(dsRowStart(t)).toBe(at);
      at += Math.ceil((t + 1) / 4);
    }
    expect(dsHeadFloats(512)).toBe(4 * 33024);
  });

  it('the reference dq from the stored dS is the reference backward\'s dq', () => {
    const s = { B: 2, T: 9, nH: 4, nKV: 2, D: 6 };
    const rng = new Rng(3);
    const nq = s.B * s.T * s.nH * s.D;
    const nk = s.B * s.T * s.nKV * s.D;
    const [q, k, v, o, dO] = [nq, nk, nk, nq, nq].map((n) => rng.normalArray(n));
    const lse = rng.normalArray(s.B * s.nH * s.T);
    const rb = attentionBackwardRef(q, k, v, o, lse, dO, s.B, s.T, s.nH, s.nKV, s.D);
    const dq = new Float64Array(nq);
    for (const c of [{ pair0: 0, pairs: 3 }, { pair0: 3, pairs: 1 }]) {
      dqFromDsRef(storedDsRef(q, k, v, o, lse, dO, s.B, s.T, s.nH, s.nKV, s.D, c.pair0, c.pairs), k, dq, s.B, s.T, s.nH, s.nKV, s.D, c.pair0, c.pairs);
    }
    expectClose(dq, rb.dq, { atol: 1e-12, rtol: 1e-10 });
  });

  it('chunks the pairs evenly into what fits, none when one pair does not', () => {
    const unit = dsPairBytes(64, 2);
    expect(dsChunks(2, 3, 2, 64, 6 * unit)).toEqual([{ pair0: 0, pairs: 6 }]);
    expect(dsChunks(5, 1, 2, 64, 2 * unit + 5)).toEqual([{ pair0: 0, pairs: 2 }, { pair0: 2, pairs: 2 }, { pair0: 4, pairs: 1 }]);
    expect(dsChunks(4, 2, 2, 64, 7 * unit)).toEqual([{ pair0: 0, pairs: 4 }, { pair0: 4, pairs: 4 }]);
    expect(dsChunks(4, 2, 2, 64, unit - 4)).toEqual([]);
    // bf16 dS (the INT8-dP backward): half the bytes, twice the pairs per chunk.
    expect(dsPairBytes(64, 2, 'bf16')).toBe(unit / 2);
    expect(dsChunks(4, 2, 2, 64, 4 * unit, 'bf16')).toEqual([{ pair0: 0, pairs: 8 }]);
    expect(dsChunks(5, 1, 2, 64, unit, 'bf16')).toEqual([{ pair0: 0, pairs: 2 }, { pair0: 2, pairs: 2 }, { pair0: 4, pairs: 1 }]);
  });
});

describe('stored-dS backward vs reference and the recompute path', () => {
  const cases: [Shape, Opts][] = [
    [{ B: 1, T: 1, nH: 2, nKV: 1, D: 8 }, {}],
    [{ B: 2, T: 7, nH: 4, nKV: 2, D: 8 }, {}],                                              // default dkdv tile (row-per-thread here)
    [{ B: 1, T: 19, nH: 2, nKV: 1, D: 8 }, { dkdv: { BM: 6, BN: 6, NT: 12 } }],              // row-per-thread, key blocks off the vec4s
    [{ B: 1, T: 65, nH: 4, nKV: 1, D: 64 }, {}],                                            // G 4, T off the tiles
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 10 }, { dqDs: { BQ: 16, BK: 16, RG: 1, CV: 2 } }],    // half vec4 (vec2 access)
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 64 }, { dkdv: { BM: 16, BN: 32, NT: 64, blocked: true } }],
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 24 }, { dkdv: { BM: 32, BN: 64, NT: 128, blocked: true }, dqDs: { BQ: 64, BK: 32, RG: 2, CV: 2 } }],
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 64 }, { dkdv: { BM: 32, BN: 64, NT: 128, blocked: true, chunk: 4, prefetch: true } }], // the H200's kind
    [{ B: 1, T: 130, nH: 2, nKV: 2, D: 64 }, { dkdv: { BM: 32, BN: 64, NT: 256, blocked: true, chunk: 4, keep: true }, dqDs: { BQ: 128, BK: 16, RG: 2, CV: 1 } }],
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 40 }, { dkdv: { BM: 16, BN: 32, NT: 64, blocked: true, chunk: 4 }, dqDs: { BQ: 16, BK: 16, RG: 1, CV: 4 } }], // DP 10 over TC 3
    [{ B: 1, T: 20, nH: 2, nKV: 1, D: 128 }, { dkdv: { BM: 16, BN: 8, NT: 16, blocked: true }, dqDs: { BQ: 8, BK: 8, RG: 1, CV: 4 } }],
    // Prefetched and written-out key loops (several key steps, T off the tiles, GQA).
    [{ B: 1, T: 130, nH: 4, nKV: 2, D: 16 }, { dqDs: { BQ: 32, BK: 16, RG: 1, CV: 1, prefetch: true } }],
    [{ B: 1, T: 97, nH: 2, nKV: 1, D: 24 }, { dqDs: { BQ: 32, BK: 16, RG: 2, CV: 1, unroll: true } }],
    [{ B: 2, T: 70, nH: 2, nKV: 1, D: 16 }, { dqDs: { BQ: 32, BK: 16, RG: 1, CV: 1, prefetch: true, unroll: true } }],
  ];
  for (const [i, [s, o]] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}${o.dqDs ? ` dqDs ${dqDsTileName(o.dqDs)}` : ''}`, () => check(s, 700 + i, o));
  }

  it('chunked: a scratch of two pairs for five (chunks 2, 2, 1)', async () => {
    const g = await check({ B: 5, T: 19, nH: 2, nKV: 1, D: 16 }, 710, { scratchPairs: 2 });
    expect(g.plan.chunks).toEqual([{ pair0: 0, pairs: 2 }, { pair0: 2, pairs: 2 }, { pair0: 4, pairs: 1 }]);
  });

  it('chunked with GQA over (b, KV head) pairs, a blocked dK/dV tile', async () => {
    const g = await check({ B: 2, T: 33, nH: 4, nKV: 2, D: 16 }, 711, { scratchPairs: 3, dkdv: { BM: 16, BN: 16, NT: 16, blocked: true } });
    expect(g.plan.chunks.length).toBe(2);
  });

  it('falls back to the recompute path when one pair does not fit, and says why', async () => {
    const rt = await testRuntime();
    const s = { B: 1, T: 33, nH: 2, nKV: 1, D: 8 };
    const small = rt.createBuffer('workspace', 'small', 256);
    try {
      const plan = attentionDqPlan(rt, { ...s, dsScratch: small });
      expect(plan.path).toBe('recompute');
      expect(plan.why).toMatch(/exceeds the scratch/);
      expect(attentionDqPlan(rt, s)).toMatchObject({ path: 'recompute', why: 'no dS scratch' });
      expect(() => attentionDqPlan(rt, { ...s, dsScratch: small, dqPath: 'stored' })).toThrow(/stored-dS path cannot run.*exceeds/);
      const none = attentionBackward(rt, { label: 'fb', ...s, dsScratch: small, q: small, k: small, v: small, o: small, lse: small, dO: small, dq: small, dk: small, dv: small, workspace: small });
      expect(none.map((d) => d.label)).toEqual(['fb.attnBwdDi', 'fb.attnBwdDq', 'fb.attnBwdDkDv']);
    } finally {
      rt.mem.free(small);
    }
  });

  it('refuses dq-from-dS tiles it does not implement; the candidates fit D 64 here or say why', async () => {
    const rt = await testRuntime();
    expect(dqDsTileProblem(rt, { BQ: 64, BK: 32, RG: 3, CV: 1 }, 64)).toMatch(/RG 3/);
    expect(dqDsTileProblem(rt, { BQ: 64, BK: 32, RG: 1, CV: 3 }, 64)).toMatch(/CV 3/);
    expect(dqDsTileProblem(rt, { BQ: 12, BK: 32, RG: 2, CV: 1 }, 64)).toMatch(/BQ 12 not a multiple of 8/);
    expect(dqDsTileProblem(rt, { BQ: 64, BK: 6, RG: 1, CV: 1 }, 64)).toMatch(/BK 6/);
    expect(dqDsTileProblem(rt, { BQ: 64, BK: 32, RG: 1, CV: 1 }, 64)).toBeNull();
    expect(dqDsTileProblem(rt, { BQ: 8, BK: 8, RG: 1, CV: 4, prefetch: true }, 64)).toMatch(/prefetch holds more/);
    expect(DQDS_CANDIDATES.some((t) => !dqDsTileProblem(rt, t, 64))).toBe(true);
  });

  it('a measured dq tile (MEASURED_ATTENTION_TILES\' dqDs) is chosen where it applies and fits, else the first candidate that fits', async () => {
    const rt = await testRuntime();
    const first = chooseDqDsTile(rt, 16);
    const entry = { match: { vendor: rt.gpu.adapterInfo.vendor.toUpperCase() }, source: 'test', table: {}, dqDs: { D16: '64x16r1c1p' } };
    MEASURED_ATTENTION_TILES.push(entry);
    try {
      expect(dqDsTileName(first)).not.toBe('64x16r1c1p');
      expect(dqDsTileName(chooseDqDsTile(rt, 16))).toBe('64x16r1c1p');
      // A candidate this head dim cannot run (prefetch holds too much), and a name that is none.
      entry.dqDs.D16 = '32x32r1c1p';
      expect(dqDsTileProblem(rt, DQDS_CANDIDATES.find((t) => dqDsTileName(t) === '32x32r1c1p')!, 16)).toMatch(/prefetch holds more/);
      expect(chooseDqDsTile(rt, 16)).toEqual(first);
      entry.dqDs.D16 = 'no-such-tile';
      expect(chooseDqDsTile(rt, 16)).toEqual(first);
    } finally {
      MEASURED_ATTENTION_TILES.splice(MEASURED_ATTENTION_TILES.indexOf(entry), 1);
    }
  });
});
