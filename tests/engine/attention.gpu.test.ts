import { describe, expect, it } from 'vitest';
import { acquireNodeGpu } from '../../src/engine/gpu/node';
import { Runtime } from '../../src/engine/gpu/runtime';
import {
  attentionBackward, attentionBackwardWorkspaceBytes, attentionForward, type AttnTile, chooseAttentionTile, MEASURED_ATTENTION_TILES,
} from '../../src/engine/kernels/attention';
import { attentionBackwardRef, attentionForwardRef } from '../../src/engine/kernels/attention.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

/**
 * A runtime whose Dawn device zero-initialises workgroup memory with Tint's loop rather than Vulkan's
 * OpConstantNull extension: SwiftShader compiles the latter element by element (seconds per pipeline
 * with 16 KiB of tiles), the former in milliseconds. Same semantics; these kernels never read
 * workgroup memory they did not write.
 */
let rtPromise: Promise<Runtime> | null = null;
function testRuntime(): Promise<Runtime> {
  rtPromise ??= acquireNodeGpu({
    dawnFlags: ['disable-dawn-features=use_vulkan_zero_initialize_workgroup_memory_extension'],
  }).then((gpu) => new Runtime(gpu));
  return rtPromise;
}

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
    // The H200 entry: every tile in it fits an H200-like device (it is checked there at run time too).
    const h200 = MEASURED_ATTENTION_TILES.find((t) => t.match.device === 'h200')!;
    for (const [BM, BN, NT] of Object.values(h200.table)) expect(NT % Math.min(BM, BN)).toBe(0);
  });
});
