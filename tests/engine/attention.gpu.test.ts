import { describe, expect, it } from 'vitest';
import { Runtime } from '../../src/engine/gpu/runtime';
import {
  ATTENTION_CANDIDATES, attentionBackward, attentionBackwardWorkspaceBytes, attentionForward, attentionTileProblem, type AttentionPass, attnTileName, attnTileOf, type AttnTile,
  type AttnTileTuple, chooseAttentionTile, MEASURED_ATTENTION_TILES,
} from '../../src/engine/kernels/attention/attention';
import { attentionBackwardRef, attentionForwardRef } from '../../src/engine/kernels/attention/attention.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { attentionTestRuntime } from '../helpers/gpu';

const testRuntime = attentionTestRuntime;

interface Shape { B: number; T: number; nH: number; nKV: number; D: number }
interface Tiles { fwd?: AttnTile; dq?: AttnTile; dkdv?: AttnTile }

/** Uploads seeded inputs, runs forward then backward on the GPU, reads everything back. */
async function runGpu(rt: Runtime, s: Shape, seed: number, tiles: Tiles = {}, repeatBackward = 1) {
  const rng = new Rng(seed);
  const nq = s.B * s.T * s.nH * s.D;
  const nk = s.B * s.T * s.nKV * s.D;
  const host = { q: rng.normalArray(nq), k: rng.normalArray(nk), v: rng.normalArray(nk), dO: rng.normalArray(nq) };
  const q = rt.upload('activations', 'q', host.q);
  const k = rt.upload('activations', 'k', host.k);
  const v = rt.upload('activations', 'v', host.v);
  const dO = rt.upload('activations', 'dO', host.dO);
  const o = rt.createBuffer('activations', 'o', nq * 4);
  const lse = rt.createBuffer('activations', 'lse', s.B * s.nH * s.T * 4);
  const dq = rt.createBuffer('grads', 'dq', nq * 4);
  const dk = rt.createBuffer('grads', 'dk', nk * 4);
  const dv = rt.createBuffer('grads', 'dv', nk * 4);
  const ws = rt.createBuffer('workspace', 'di', attentionBackwardWorkspaceBytes(s.B, s.T, s.nH));
  const fwd = attentionForward(rt, { label: 't', q, k, v, o, lse, ...s, tile: tiles.fwd });
  const bwd = attentionBackward(rt, {
    label: 't', q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, ...s, tiles: { dq: tiles.dq, dkdv: tiles.dkdv },
  });
  rt.run(fwd);
  const runs: Float32Array[][] = [];
  for (let i = 0; i < repeatBackward; i++) {
    rt.run(bwd);
    runs.push([await rt.readF32(dq, 0, nq), await rt.readF32(dk, 0, nk), await rt.readF32(dv, 0, nk)]);
  }
  const out = {
    host, o: await rt.readF32(o, 0, nq), lse: await rt.readF32(lse, 0, s.B * s.nH * s.T),
    dq: runs[0][0], dk: runs[0][1], dv: runs[0][2], runs,
  };
  for (const b of [q, k, v, dO, o, lse, dq, dk, dv, ws]) rt.mem.free(b);
  return out;
}

async function checkCase(s: Shape, seed: number, tiles: Tiles = {}) {
  const rt = await testRuntime();
  const g = await runGpu(rt, s, seed, tiles);
  const tag = `B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}`;
  const ref = attentionForwardRef(g.host.q, g.host.k, g.host.v, s.B, s.T, s.nH, s.nKV, s.D);
  expectClose(g.o, ref.o, { atol: 2e-5, rtol: 1e-4, label: `${tag} o` });
  expectClose(g.lse, ref.lse, { atol: 2e-5, rtol: 1e-5, label: `${tag} lse` });
  // The reference backward takes the GPU's o and lse, so this isolates the backward kernels.
  const rb = attentionBackwardRef(g.host.q, g.host.k, g.host.v, g.o, g.lse, g.host.dO, s.B, s.T, s.nH, s.nKV, s.D);
  expectClose(g.dq, rb.dq, { atol: 1e-4, rtol: 1e-3, label: `${tag} dq` });
  expectClose(g.dk, rb.dk, { atol: 1e-4, rtol: 1e-3, label: `${tag} dk` });
  expectClose(g.dv, rb.dv, { atol: 1e-4, rtol: 1e-3, label: `${tag} dv` });
}

describe('attention GPU vs reference (default tiles)', () => {
  const cases: Shape[] = [
    { B: 1, T: 1, nH: 2, nKV: 1, D: 8 },
    { B: 2, T: 7, nH: 4, nKV: 2, D: 8 },
    { B: 1, T: 65, nH: 4, nKV: 1, D: 8 },
    { B: 1, T: 33, nH: 4, nKV: 1, D: 64 },
    { B: 1, T: 65, nH: 2, nKV: 2, D: 64 },
    { B: 1, T: 7, nH: 2, nKV: 1, D: 10 },   // D not a multiple of 4: half-filled last vec4
    { B: 1, T: 5, nH: 2, nKV: 1, D: 128 },
  ];
  for (const [i, s] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}`, () => checkCase(s, 100 + i));
  }
});

describe('attention GPU vs reference (forced small tiles)', () => {
  it('several tiles per row and per column, GQA 2, D 32', () =>
    checkCase({ B: 2, T: 33, nH: 2, nKV: 1, D: 32 }, 7, {
      fwd: { BM: 8, BN: 8, NT: 32 },
      dq: { BM: 16, BN: 8, NT: 64 },
      dkdv: { BM: 8, BN: 16, NT: 64 },
    }));
});

describe('blocked forward tiles', () => {
  // [shape, blocked fwd tile]: row groups of 4 × TX threads, key slots RK = BN/TX, vec4 columns OC.
  const cases: [Shape, AttnTile][] = [
    [{ B: 1, T: 1, nH: 2, nKV: 1, D: 8 }, { BM: 16, BN: 16, NT: 64, blocked: true }],      // TX 16 > DP
    [{ B: 2, T: 7, nH: 4, nKV: 2, D: 8 }, { BM: 8, BN: 8, NT: 16, blocked: true }],
    [{ B: 1, T: 65, nH: 4, nKV: 1, D: 8 }, { BM: 16, BN: 32, NT: 32, blocked: true }],     // RK 4
    [{ B: 1, T: 20, nH: 2, nKV: 1, D: 10 }, { BM: 8, BN: 8, NT: 8, blocked: true }],       // half vec4, TX 4
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 8 }, { BM: 64, BN: 64, NT: 256, blocked: true }],   // 16 × 16 threads
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 40 }, { BM: 16, BN: 64, NT: 32, blocked: true }],    // RK 8, OC 2
    // The H200's tile shapes (TX 16: two 8-lane runs per row group) at D that fit SwiftShader's 32 KiB.
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 32 }, { BM: 64, BN: 32, NT: 256, blocked: true }],
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 64 }, { BM: 32, BN: 32, NT: 128, blocked: true }],   // vec4 access
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 10 }, { BM: 32, BN: 32, NT: 128, blocked: true }],   // vec2 access
    [{ B: 1, T: 65, nH: 2, nKV: 1, D: 64 }, { BM: 64, BN: 16, NT: 128, blocked: true }],   // TX 8, OC 2
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 64 }, { BM: 32, BN: 32, NT: 64, blocked: true }],
    [{ B: 1, T: 7, nH: 2, nKV: 1, D: 40 }, { BM: 8, BN: 16, NT: 16, blocked: true }],      // DP 10 over TX 8
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 128 }, { BM: 16, BN: 16, NT: 64, blocked: true }],
  ];
  for (const [i, [s, fwd]] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D} tile ${fwd.BM}x${fwd.BN}/${fwd.NT}`, () => checkCase(s, 300 + i, { fwd }));
  }

  it('refuses a split it does not implement, with the reason', async () => {
    const rt = await testRuntime();
    expect(attentionTileProblem(rt, 'fwd', { BM: 16, BN: 16, NT: 32, blocked: true }, 128)).toMatch(/D 128 needs more than 2 vec4/);
    expect(attentionTileProblem(rt, 'fwd', { BM: 6, BN: 16, NT: 16, blocked: true }, 8)).toMatch(/BM 6 not a multiple of 4/);
    expect(attentionTileProblem(rt, 'fwd', { BM: 16, BN: 16, NT: 6, blocked: true }, 8)).toMatch(/not a multiple of 4 row groups/);
    expect(attentionTileProblem(rt, 'fwd', { BM: 8, BN: 12, NT: 16, blocked: true }, 8)).toMatch(/keys not split/); // 12 keys over 8 threads
    expect(attentionTileProblem(rt, 'fwd', { BM: 8, BN: 128, NT: 16, blocked: true }, 8)).toMatch(/keys not split/); // 16 per thread
    expect(attentionTileProblem(rt, 'fwd', { BM: 8, BN: 64, NT: 16, blocked: true }, 8)).toBeNull();
    expect(attentionTileProblem(rt, 'fwd', { BM: 16, BN: 24, NT: 48, blocked: true }, 8)).toMatch(/12 threads per row group/);
    expect(() => attentionForward(rt, {
      label: 'bad', B: 1, T: 4, nH: 1, nKV: 1, D: 128, tile: { BM: 16, BN: 16, NT: 32, blocked: true },
      q: null!, k: null!, v: null!, o: null!, lse: null!,
    })).toThrow(/D 128 needs more than 2 vec4/);
  });

  it('a measured [BM, BN, NT, true] entry selects the blocked kernel', async () => {
    const rt = await testRuntime();
    const entry = { match: { vendor: rt.gpu.adapterInfo.vendor.toUpperCase() }, source: 'test', table: { 'fwd/D16': [16, 32, 64, true] as AttnTileTuple } };
    MEASURED_ATTENTION_TILES.push(entry);
    try {
      const t = chooseAttentionTile(rt, 'fwd', 16);
      expect(t).toEqual({ BM: 16, BN: 32, NT: 64, blocked: true });
      expect(attnTileName(t)).toBe('16x32/64b');
    } finally {
      MEASURED_ATTENTION_TILES.splice(MEASURED_ATTENTION_TILES.indexOf(entry), 1);
    }
  });
});

describe('blocked backward tiles', () => {
  // [shape, blocked dq tile, blocked dkdv tile]. Own rows (dq: BM queries, dkdv: BN keys) go 4 to a
  // thread in TO = own/4 groups; TS = NT/TO threads split the other rows (RS each) and D (CS vec4s each).
  const cases: [Shape, AttnTile, AttnTile][] = [
    [{ B: 1, T: 1, nH: 2, nKV: 1, D: 8 }, { BM: 16, BN: 16, NT: 16, blocked: true }, { BM: 16, BN: 16, NT: 16, blocked: true }], // TS 4 > DP 2
    [{ B: 2, T: 7, nH: 4, nKV: 2, D: 8 }, { BM: 8, BN: 8, NT: 8, blocked: true }, { BM: 8, BN: 8, NT: 4, blocked: true }],       // RS 2 / RS 4
    [{ B: 1, T: 65, nH: 4, nKV: 1, D: 8 }, { BM: 32, BN: 32, NT: 256, blocked: true }, { BM: 32, BN: 32, NT: 64, blocked: true }], // RS 1, G 4
    [{ B: 1, T: 9, nH: 2, nKV: 1, D: 10 }, { BM: 8, BN: 8, NT: 8, blocked: true }, { BM: 8, BN: 8, NT: 8, blocked: true }],      // half vec4
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 64 }, { BM: 16, BN: 32, NT: 32, blocked: true }, { BM: 32, BN: 16, NT: 32, blocked: true }], // CS 2
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 64 }, { BM: 16, BN: 16, NT: 16, blocked: true }, { BM: 16, BN: 16, NT: 16, blocked: true }], // CS 4
    [{ B: 1, T: 130, nH: 2, nKV: 2, D: 8 }, { BM: 64, BN: 64, NT: 256, blocked: true }, { BM: 64, BN: 64, NT: 256, blocked: true }], // 16 × 16
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 24 }, { BM: 64, BN: 32, NT: 128, blocked: true }, { BM: 32, BN: 64, NT: 128, blocked: true }],
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 40 }, { BM: 16, BN: 16, NT: 32, blocked: true }, { BM: 16, BN: 32, NT: 64, blocked: true }], // DP 10 over TS 8
    [{ B: 1, T: 20, nH: 2, nKV: 1, D: 128 }, { BM: 8, BN: 16, NT: 16, blocked: true }, { BM: 16, BN: 8, NT: 16, blocked: true }],
  ];
  for (const [i, [s, dq, dkdv]] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D} dq ${dq.BM}x${dq.BN}/${dq.NT} dkdv ${dkdv.BM}x${dkdv.BN}/${dkdv.NT}`,
      () => checkCase(s, 400 + i, { dq, dkdv }));
  }

  it('gives bit-identical gradients run to run (G 4 summed in a fixed order)', async () => {
    const rt = await testRuntime();
    const tile: AttnTile = { BM: 16, BN: 16, NT: 16, blocked: true };
    const g = await runGpu(rt, { B: 1, T: 33, nH: 4, nKV: 1, D: 8 }, 11, { dq: tile, dkdv: tile }, 2);
    for (let j = 0; j < 3; j++) expect(Array.from(g.runs[1][j])).toEqual(Array.from(g.runs[0][j]));
  });

  it('refuses a split it does not implement, with the reason', async () => {
    const rt = await testRuntime();
    const tile = (BM: number, BN: number, NT: number): AttnTile => ({ BM, BN, NT, blocked: true });
    expect(attentionTileProblem(rt, 'dq', tile(16, 16, 16), 128)).toMatch(/D 128 needs more than 4 vec4/);
    expect(attentionTileProblem(rt, 'dq', tile(16, 16, 8), 64)).toMatch(/16 rows not split 1, 2, 4 per thread/); // RS 8
    expect(attentionTileProblem(rt, 'dq', tile(16, 16, 6), 8)).toMatch(/NT 6 not a multiple of 4 row groups/);
    expect(attentionTileProblem(rt, 'dkdv', tile(16, 6, 8), 8)).toMatch(/6 keys not a multiple of 4/);
    expect(attentionTileProblem(rt, 'dq', tile(6, 16, 8), 8)).toMatch(/6 queries not a multiple of 4/);
    expect(attentionTileProblem(rt, 'dkdv', tile(64, 64, 256), 64)).toMatch(/B workgroup storage/);
    expect(attentionTileProblem(rt, 'dkdv', tile(16, 32, 32), 64)).toBeNull();
    expect(() => attentionBackward(rt, {
      label: 'bad', B: 1, T: 4, nH: 1, nKV: 1, D: 128, tiles: { dkdv: tile(16, 16, 16) },
      q: null!, k: null!, v: null!, o: null!, lse: null!, dO: null!, dq: null!, dk: null!, dv: null!,
    })).toThrow(/dkdv tile .*D 128 needs more than 4 vec4/);
  });
});

describe('streamed blocked backward tiles (chunk)', () => {
  // [shape, dq tile, dkdv tile]: the blocked thread split, but every tile re-stages both operand
  // pairs `chunk` vec4 columns of D at a time (a last chunk past D is zero-filled); each case runs
  // plain, with prefetch (the next staging step fetched during the FMAs), and where the tiles allow
  // it with keep (K / Q kept in full rows), prefetched in even cases and not in odd ones.
  const st = (BM: number, BN: number, NT: number, chunk: number): AttnTile => ({ BM, BN, NT, blocked: true, chunk });
  const cases: [Shape, AttnTile, AttnTile][] = [
    [{ B: 1, T: 1, nH: 2, nKV: 1, D: 8 }, st(16, 16, 16, 2), st(16, 16, 16, 2)],        // one chunk, TS 4 > DP 2
    [{ B: 2, T: 7, nH: 4, nKV: 2, D: 8 }, st(8, 8, 8, 1), st(8, 8, 4, 1)],              // RS 2 / RS 4, 2 chunks
    [{ B: 1, T: 65, nH: 4, nKV: 1, D: 16 }, st(32, 32, 128, 4), st(32, 32, 64, 2)],     // G 4
    [{ B: 1, T: 130, nH: 2, nKV: 1, D: 32 }, st(64, 64, 256, 2), st(64, 64, 256, 2)],   // 16 × 16 threads, RS 4
    [{ B: 1, T: 65, nH: 4, nKV: 2, D: 64 }, st(32, 64, 128, 4), st(32, 64, 128, 4)],    // CS 1 / CS 2
    [{ B: 1, T: 130, nH: 2, nKV: 2, D: 64 }, st(64, 32, 256, 4), st(32, 64, 256, 4)],   // RS 2
    [{ B: 1, T: 33, nH: 2, nKV: 1, D: 40 }, st(16, 16, 32, 4), st(16, 32, 64, 4)],      // DP 10: chunks 4, 4, 2
    [{ B: 1, T: 20, nH: 2, nKV: 1, D: 128 }, st(16, 16, 64, 4), st(16, 16, 64, 8)],     // CS 2, 8 staged vec4s per thread
  ];
  for (const [i, [s, dq, dkdv]] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D} dq ${attnTileName(dq)} dkdv ${attnTileName(dkdv)}`,
      async () => {
        await checkCase(s, 500 + i, { dq, dkdv });
        await checkCase(s, 500 + i, { dq: { ...dq, prefetch: true }, dkdv: { ...dkdv, prefetch: true } });
        const rt = await testRuntime();
        const kept = (t: AttnTile): AttnTile => (i % 2 === 0 ? { ...t, keep: true, prefetch: true } : { ...t, keep: true });
        const keep = { dq: kept(dq), dkdv: kept(dkdv) };
        if (!attentionTileProblem(rt, 'dq', keep.dq, s.D) && !attentionTileProblem(rt, 'dkdv', keep.dkdv, s.D)) {
          await checkCase(s, 500 + i, keep);
        }
      });
  }

  it('gives bit-identical gradients run to run (G 4 summed in a fixed order)', async () => {
    const rt = await testRuntime();
    const tile: AttnTile = { ...st(16, 16, 16, 2), prefetch: true };
    const g = await runGpu(rt, { B: 1, T: 33, nH: 4, nKV: 1, D: 8 }, 12, { dq: tile, dkdv: tile }, 2);
    for (let j = 0; j < 3; j++) expect(Array.from(g.runs[1][j])).toEqual(Array.from(g.runs[0][j]));
  });

  it('refuses what it does not implement, with the reason; tables spell it [BM, BN, NT, true, { chunk }]', async () => {
    const rt = await testRuntime();
    expect(attentionTileProblem(rt, 'dq', st(16, 16, 16, 2), 10)).toMatch(/needs D % 4 == 0, not D 10/);
    expect(attentionTileProblem(rt, 'dkdv', st(16, 16, 16, 0), 8)).toMatch(/chunk 0 not a positive integer/);
    expect(attentionTileProblem(rt, 'fwd', st(16, 16, 64, 2), 8)).toMatch(/only the blocked dq\/dkdv kernels/);
    expect(attentionTileProblem(rt, 'dq', { BM: 16, BN: 16, NT: 64, chunk: 2 }, 8)).toMatch(/only the blocked dq\/dkdv kernels/);
    expect(attentionTileProblem(rt, 'dq', st(64, 64, 256, 4), 64)).toMatch(/37888 B workgroup storage/); // fits the H200's 48 KiB only
    expect(attentionTileProblem(rt, 'dq', st(8, 16, 16, 8), 128)).toMatch(/chunk 8 stages 32 > 8 vec4 per thread/);
    expect(attentionTileProblem(rt, 'dq', { BM: 16, BN: 16, NT: 16, blocked: true, prefetch: true }, 8)).toMatch(/prefetch needs chunk/);
    expect(attentionTileProblem(rt, 'dkdv', { ...st(16, 16, 32, 4), keep: true }, 40)).toMatch(/keep needs D\/4 a multiple of chunk 4, not D 40/);
    expect(attentionTileProblem(rt, 'dq', { ...st(64, 64, 256, 2), keep: true }, 64)).toMatch(/44032 B workgroup storage/); // no full step
    expect(attentionTileProblem(rt, 'dkdv', { ...st(64, 64, 256, 2), keep: true }, 64)).toMatch(/52224 B workgroup storage/);
    const t = attnTileOf([64, 64, 256, true, { chunk: 4, prefetch: true, keep: true }]);
    expect(t).toEqual({ ...st(64, 64, 256, 4), prefetch: true, keep: true });
    expect(attnTileName(t)).toBe('64x64/256bc4pk');
    // Every streamed candidate can run a base layer (D 64) on the H200 (48 KiB, 1024 threads).
    const h200Rt = { device: { limits: { maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024, maxComputeWorkgroupStorageSize: 49152 } } } as unknown as Runtime;
    for (const pass of ['dq', 'dkdv'] as const) {
      for (const e of ATTENTION_CANDIDATES[pass].filter((c) => c[4]?.chunk)) {
        expect(attentionTileProblem(h200Rt, pass, attnTileOf(e), 64), `${pass} ${attnTileName(attnTileOf(e))}`).toBeNull();
      }
    }
  });
});

describe('attention backward determinism and tiles', () => {
  it('gives bit-identical gradients run to run', async () => {
    const rt = await testRuntime();
    const s = { B: 1, T: 33, nH: 4, nKV: 1, D: 8 };
    const g = await runGpu(rt, s, 9, {}, 2);
    for (let j = 0; j < 3; j++) expect(Array.from(g.runs[1][j])).toEqual(Array.from(g.runs[0][j]));
  });

});

describe('attention tile choice', () => {
  it('a measured tile for this GPU model wins when it fits; one that does not fit is passed over', async () => {
    const rt = await testRuntime();
    const info = rt.gpu.adapterInfo;
    const firstFit = chooseAttentionTile(rt, 'fwd', 16);
    const dqFirstFit = chooseAttentionTile(rt, 'dq', 16);
    const entry = { match: { vendor: info.vendor.toUpperCase() }, source: 'test', table: { 'fwd/D16': [16, 8, 64] as [number, number, number] } };
    MEASURED_ATTENTION_TILES.push(entry);
    try {
      expect(chooseAttentionTile(rt, 'fwd', 16)).toEqual({ BM: 16, BN: 8, NT: 64 });
      expect(chooseAttentionTile(rt, 'dq', 16)).toEqual(dqFirstFit); // no dq entry: first fit
      entry.table['fwd/D16'] = [16, 8, 48]; // 48 threads do not split 16 rows evenly
      expect(chooseAttentionTile(rt, 'fwd', 16)).toEqual(firstFit);
      entry.match.vendor = 'another-vendor';
      entry.table['fwd/D16'] = [16, 8, 64];
      expect(chooseAttentionTile(rt, 'fwd', 16)).toEqual(firstFit);
    } finally {
      MEASURED_ATTENTION_TILES.splice(MEASURED_ATTENTION_TILES.indexOf(entry), 1);
    }
    // The H200 entry: every tile in it can run there (the H200's limits as Dawn reports them).
    const h200 = MEASURED_ATTENTION_TILES.find((t) => t.match.device === 'h200')!;
    const h200Limits = { maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024, maxComputeWorkgroupStorageSize: 49152 };
    const h200Rt = { device: { limits: h200Limits } } as unknown as Runtime;
    for (const [key, e] of Object.entries(h200.table)) {
      const [pass, d] = key.split('/D');
      expect(attentionTileProblem(h200Rt, pass as AttentionPass, attnTileOf(e), Number(d)), key).toBeNull();
    }
  });
});
