import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { attentionBackwardWorkspaceBytes, attentionForward, type AttnTile, type AttnTileTuple, MEASURED_ATTENTION_TILES } from '../../src/engine/kernels/attention/attention';
import {
  attentionBackwardI8, attentionForwardI8, attentionI8DkdvTileProblem, attentionI8FwdTileProblem, chooseAttentionI8DkdvTile, chooseAttentionI8Tile,
  headCodesLayout, quantizeHeadsI8,
} from '../../src/engine/kernels/attention/i8';
import { attentionBackwardRef, attentionForwardRef } from '../../src/engine/kernels/attention/attention.ref';
import { dsPairBytes } from '../../src/engine/kernels/attention/ds';
import { dequantizeRef, quantizeRef } from '../../src/engine/kernels/quantize/quantize.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { attentionTestRuntime } from '../helpers/gpu';

interface Shape { B: number; T: number; nH: number; nKV: number; D: number }

/** Per (token, head) row INT8 codes of x, dequantized: what the INT8 scores multiply. */
function dequantRows(x: Float32Array, D: number): Float32Array {
  return dequantizeRef(quantizeRef(x, 'int8', { kind: 'row', rowLength: D }));
}

async function forwardI8(rt: Runtime, s: Shape, host: { q: Float32Array; k: Float32Array; v: Float32Array; dO: Float32Array }) {
  const nq = s.B * s.T * s.nH * s.D;
  const nk = s.B * s.T * s.nKV * s.D;
  const q = rt.upload('activations', 'q', host.q);
  const k = rt.upload('activations', 'k', host.k);
  const v = rt.upload('activations', 'v', host.v);
  const qc = rt.createBuffer('workspace', 'qc', headCodesLayout(nq / s.D, s.D).bytes);
  const kc = rt.createBuffer('workspace', 'kc', headCodesLayout(nk / s.D, s.D).bytes);
  const o = rt.createBuffer('activations', 'o', nq * 4);
  const lse = rt.createBuffer('activations', 'lse', s.B * s.nH * s.T * 4);
  rt.run([
    ...quantizeHeadsI8(rt, 'q', q, nq / s.D, s.D, qc),
    ...quantizeHeadsI8(rt, 'k', k, nk / s.D, s.D, kc),
    ...attentionForwardI8(rt, { label: 't', qc, kc, v, o, lse, ...s }),
  ]);
  const out = { o: await rt.readF32(o, 0, nq), lse: await rt.readF32(lse, 0, s.B * s.nH * s.T), qc: await rt.readU32(qc, 0, nq / 4) };
  // The backward from the same codes (re-quantized from the same q and k, as the model does), dS
  // stored in chunks of one (b, KV head) pair to cover the chunked path.
  const dO = rt.upload('activations', 'dO', host.dO);
  const dq = rt.createBuffer('grads', 'dq', nq * 4);
  const dk = rt.createBuffer('grads', 'dk', nk * 4);
  const dv = rt.createBuffer('grads', 'dv', nk * 4);
  const ws = rt.createBuffer('workspace', 'di', attentionBackwardWorkspaceBytes(s.B, s.T, s.nH));
  const dsScratch = rt.createBuffer('workspace', 'ds', dsPairBytes(s.T, s.nH / s.nKV));
  rt.run([
    ...quantizeHeadsI8(rt, 'q', q, nq / s.D, s.D, qc),
    ...quantizeHeadsI8(rt, 'k', k, nk / s.D, s.D, kc),
    ...attentionBackwardI8(rt, { label: 'tb', q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, dsScratch, qc, kc, ...s }),
  ]);
  const read = async () => ({ dq: await rt.readF32(dq, 0, nq), dk: await rt.readF32(dk, 0, nk), dv: await rt.readF32(dv, 0, nk) });
  const grads = await read();
  // INT8 dP too (DP8): dO's and V's codes, each buffer with its scales after the codes; the
  // default tile and a prefetching one (the kernel's two staging orders).
  const oc = rt.createBuffer('workspace', 'oc', headCodesLayout(nq / s.D, s.D).bytes);
  const vc = rt.createBuffer('workspace', 'vc', headCodesLayout(nk / s.D, s.D).bytes);
  // Its dS is bf16: one pair's worth of that per chunk, so the chunked path is covered here too.
  const dsScratch8 = rt.createBuffer('workspace', 'ds8', dsPairBytes(s.T, s.nH / s.nKV, 'bf16'));
  const dp8: Awaited<ReturnType<typeof read>>[] = [];
  for (const tile of [undefined, DP8_PREFETCH_TILE]) {
    rt.run([
      ...quantizeHeadsI8(rt, 'q', q, nq / s.D, s.D, qc),
      ...quantizeHeadsI8(rt, 'k', k, nk / s.D, s.D, kc),
      ...quantizeHeadsI8(rt, 'dO', dO, nq / s.D, s.D, oc),
      ...quantizeHeadsI8(rt, 'v', v, nk / s.D, s.D, vc),
      ...attentionBackwardI8(rt, { label: 'tb8', q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, dsScratch: dsScratch8, qc, kc, dp: { vc, oc }, tile, ...s }),
    ]);
    dp8.push(await read());
  }
  for (const b of [dO, dq, dk, dv, ws, dsScratch, dsScratch8, oc, vc]) rt.mem.free(b);
  // The same inputs through the fp32 kernel, to show the INT8 scores are not fp32's.
  const o32 = rt.createBuffer('activations', 'o32', nq * 4);
  rt.run(attentionForward(rt, { label: 'f', q, k, v, o: o32, lse, ...s }));
  const fp32 = await rt.readF32(o32, 0, nq);
  for (const b of [q, k, v, qc, kc, o, lse, o32]) rt.mem.free(b);
  return { ...out, ...grads, dp8, fp32 };
}

// A prefetching streamed tile the DP8 variant must run as well as the default one.
const DP8_PREFETCH_TILE: AttnTile = { BM: 32, BN: 32, NT: 128, blocked: true, chunk: 2, prefetch: true };

describe('attention with INT8 scores vs the reference on dequantized Q, K', () => {
  const cases: Shape[] = [
    { B: 1, T: 1, nH: 2, nKV: 1, D: 8 },
    { B: 2, T: 7, nH: 4, nKV: 2, D: 8 },
    { B: 1, T: 70, nH: 2, nKV: 1, D: 16 },
    { B: 1, T: 65, nH: 2, nKV: 2, D: 64 },
    { B: 1, T: 9, nH: 2, nKV: 1, D: 12 },
  ];
  for (const [i, s] of cases.entries()) {
    it(`B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}`, async () => {
      const rt = await attentionTestRuntime();
      const rng = new Rng(300 + i);
      const n = (h: number) => s.B * s.T * h * s.D;
      // Spread magnitudes per row so that per-row scales matter.
      const host = {
        q: rng.normalArray(n(s.nH)).map((x, j) => x * (1 + (j % 5))), k: rng.normalArray(n(s.nKV)), v: rng.normalArray(n(s.nKV)), dO: rng.normalArray(n(s.nH)),
      };
      const g = await forwardI8(rt, s, host);
      expect(g.qc).toEqual(quantizeRef(host.q, 'int8', { kind: 'row', rowLength: s.D }).words);
      const scores = { q: dequantRows(host.q, s.D), k: dequantRows(host.k, s.D) };
      const ref = attentionForwardRef(scores.q, scores.k, host.v, s.B, s.T, s.nH, s.nKV, s.D);
      expectClose(g.o, ref.o, { atol: 2e-5, rtol: 1e-4, label: 'o' });
      expectClose(g.lse, ref.lse, { atol: 2e-5, rtol: 1e-5, label: 'lse' });
      // P from the codes, the gradient products from fp32 q, k (straight through the quantizer).
      const rb = attentionBackwardRef(host.q, host.k, host.v, g.o, g.lse, host.dO, s.B, s.T, s.nH, s.nKV, s.D, scores);
      expectClose(g.dq, rb.dq, { atol: 1e-4, rtol: 1e-3, label: 'dq' });
      expectClose(g.dk, rb.dk, { atol: 1e-4, rtol: 1e-3, label: 'dk' });
      expectClose(g.dv, rb.dv, { atol: 1e-4, rtol: 1e-3, label: 'dv' });
      if (s.T > 1) {
        const diff = g.o.reduce((m, x, j) => Math.max(m, Math.abs(x - g.fp32[j])), 0);
        expect(diff).toBeGreaterThan(1e-4);
      }
      // INT8 dP: dP from dO's and V's dequantized codes; Di and dV from fp32 dO; dq from dS stored as bf16.
      const dpOps = { dO: dequantRows(host.dO, s.D), v: dequantRows(host.v, s.D) };
      const r8 = attentionBackwardRef(host.q, host.k, host.v, g.o, g.lse, host.dO, s.B, s.T, s.nH, s.nKV, s.D, scores, dpOps, 'bf16');
      for (const [j, d] of g.dp8.entries()) {
        expectClose(d.dq, r8.dq, { atol: 1e-4, rtol: 1e-3, label: `dq (INT8 dP, tile ${j})` });
        expectClose(d.dk, r8.dk, { atol: 1e-4, rtol: 1e-3, label: `dk (INT8 dP, tile ${j})` });
        expectClose(d.dv, r8.dv, { atol: 1e-4, rtol: 1e-3, label: `dv (INT8 dP, tile ${j})` });
        // dV = Pᵀ·dO does not see dP: the same as with fp32 dP up to summation order.
        expectClose(d.dv, g.dv, { atol: 1e-5, rtol: 1e-5, label: `dv (INT8 dP vs fp32 dP, tile ${j})` });
      }
      if (s.T > 1) {
        const diff = g.dp8[0].dq.reduce((m, x, j) => Math.max(m, Math.abs(x - g.dq[j])), 0);
        expect(diff).toBeGreaterThan(1e-6);
      }
    });
  }
});

describe('INT8-score attention tiles', () => {
  it('a measured fwdI8 / dkdvI8 entry is taken first; tiles the kernels cannot run are refused by name', async () => {
    const rt = await attentionTestRuntime();
    const entry = {
      match: { vendor: rt.gpu.adapterInfo.vendor.toUpperCase() }, source: 'test',
      table: {
        'fwdI8/D16': [32, 16, 64, true] as AttnTileTuple, 'dkdvI8/D16': [32, 32, 128, true, { chunk: 2, prefetch: true }] as AttnTileTuple,
        'dkdvDp8/D16': [32, 32, 128, true, { chunk: 4 }] as AttnTileTuple,
      },
    };
    MEASURED_ATTENTION_TILES.push(entry);
    try {
      expect(chooseAttentionI8Tile(rt, 16)).toEqual({ BM: 32, BN: 16, NT: 64, blocked: true });
      expect(chooseAttentionI8DkdvTile(rt, 16)).toEqual({ BM: 32, BN: 32, NT: 128, blocked: true, chunk: 2, prefetch: true });
      expect(chooseAttentionI8DkdvTile(rt, 16, true)).toEqual({ BM: 32, BN: 32, NT: 128, blocked: true, chunk: 4 });
    } finally {
      MEASURED_ATTENTION_TILES.splice(MEASURED_ATTENTION_TILES.indexOf(entry), 1);
    }
    expect(attentionI8FwdTileProblem(rt, { BM: 32, BN: 32, NT: 64 }, 16)).toMatch(/register-blocked/);
    expect(attentionI8FwdTileProblem(rt, { BM: 16, BN: 32, NT: 32, blocked: true }, 64)).toMatch(/more than 4 words per thread/);
    expect(attentionI8DkdvTileProblem(rt, { BM: 32, BN: 64, NT: 256, blocked: true }, 64)).toMatch(/streamed kernel/);
    expect(attentionI8DkdvTileProblem(rt, { BM: 32, BN: 64, NT: 256, blocked: true, chunk: 4, keep: true }, 64)).toMatch(/no Q chunks to keep/);
  });
});
