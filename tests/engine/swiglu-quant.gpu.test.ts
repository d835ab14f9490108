/**
 * SwiGLU that writes INT8 codes: the forward h's (down_proj's X operand), h as the plain forward,
 * codes as quantizeRef; the backward [dgate | dup]'s (gate/up's dX operand over K = 2F), dgate and
 * dup as the plain backward, codes as swigluBackwardCodesRef.
 */
import { describe, expect, it } from 'vitest';
import { swigluBackward, swigluBackwardQuantized, swigluForward, swigluForwardQuantized } from '../../src/engine/kernels/swiglu/swiglu';
import { swigluBackwardCodesRef } from '../../src/engine/kernels/swiglu/swiglu.ref';
import { quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up, track } = trackBuffers();

describe('swigluForwardQuantized', () => {
  it.each([[5, 64, true], [3, 2560, true], [4, 36, false]] as const)('N=%i F=%i fused=%s: h bit for bit, codes and scales as quantizeRef', async (N, F, fused) => {
    const rt = await testRuntime();
    const rng = new Rng(N + F);
    const gate = rng.normalArray(N * F, 2);
    const upv = rng.normalArray(N * F);
    for (let c = 0; c < F; c++) upv[F + c] = 0; // an all-zero row: s = 0, codes 0
    upv[2 * F + 3] = 80; // an outlier
    const [g, u] = [up(rt, gate), up(rt, upv)];
    const mk = (label: string, bytes: number) => track(rt.createBuffer('workspace', label, bytes));
    const [h0, h, codes, scales] = [mk('h0', N * F * 4), mk('h', N * F * 4), mk('codes', N * F), mk('scales', N * 4)];
    rt.run([
      swigluForward(rt, { label: 'plain', gate: g, up: u, h: h0, dims: { N, F } }),
      ...swigluForwardQuantized(rt, { label: 'q', gate: g, up: u, h, dims: { N, F }, codes, scales, fused }),
    ]);
    const want = await rt.readF32(h0, 0, N * F);
    expect(Array.from(await rt.readF32(h, 0, N * F))).toEqual(Array.from(want));
    const ref = quantizeRef(want, 'int8', { kind: 'row', rowLength: F });
    expect(Array.from(await rt.readF32(scales, 0, N))).toEqual(Array.from(ref.scales));
    expect(Array.from(await rt.readU32(codes, 0, (N * F) / 4))).toEqual(Array.from(ref.words));
  });
});

describe('swigluBackwardQuantized', () => {
  // over: where dup goes (up's buffer, or dh's as the blocked backward of a quantized `up` runs it);
  // blocks: rows per dispatch (row0 places each block's codes and scales).
  it.each([[5, 64, 'up', 5], [3, 2560, 'up', 3], [4, 36, 'up', 4], [6, 64, 'dh', 2], [5, 128, 'dh', 2]] as const)(
    'N=%i F=%i dup over %s, blocks of %i rows: dgate, dup bit for bit, codes and scales as the reference', async (N, F, over, rows) => {
      const rt = await testRuntime();
      const rng = new Rng(N * F + 1);
      const gate = rng.normalArray(N * F, 2);
      const upv = rng.normalArray(N * F);
      const dh = rng.normalArray(N * F, 0.01);
      for (let c = 0; c < F; c++) dh[F + c] = 0; // an all-zero row: s = 0, codes 0
      dh[2 * F + 3] = 5; // an outlier in dgate's half
      if (N > 3) dh[3 * F + F - 1] = -7; // and one at the end of a row
      const mk = (label: string, bytes: number) => track(rt.createBuffer('workspace', label, bytes));
      const [codes, scales] = [mk('codes', N * 2 * F), mk('scales', N * 4)];
      // The plain backward on copies (not in place), then the quantizing one in place.
      const [dg0, du0] = [mk('dg0', N * F * 4), mk('du0', N * F * 4)];
      const [g, u, d] = [up(rt, gate), up(rt, upv), up(rt, dh)];
      rt.run([swigluBackward(rt, { label: 'plain', gate: g, up: u, dh: d, dgate: dg0, dup: du0, dims: { N, F } })]);
      const [gq, uq, dq] = [up(rt, gate), up(rt, upv), up(rt, dh)];
      const at = (b: GPUBuffer, r0: number, n: number) => ({ buffer: b, offset: r0 * F * 4, size: n * F * 4 });
      const runs = [];
      for (let r0 = 0; r0 < N; r0 += rows) {
        const n = Math.min(rows, N - r0);
        const dup = over === 'up' ? at(uq, r0, n) : at(dq, r0, n);
        runs.push(swigluBackwardQuantized(rt, {
          label: `q${r0}`, gate: at(gq, r0, n), up: at(uq, r0, n), dh: at(dq, r0, n), dgate: at(gq, r0, n), dup, dims: { N: n, F }, codes, scales, row0: r0,
        }));
      }
      rt.run(runs);
      const wantG = await rt.readF32(dg0, 0, N * F);
      const wantU = await rt.readF32(du0, 0, N * F);
      expect(Array.from(await rt.readF32(gq, 0, N * F))).toEqual(Array.from(wantG));
      expect(Array.from(await rt.readF32(over === 'up' ? uq : dq, 0, N * F))).toEqual(Array.from(wantU));
      const ref = swigluBackwardCodesRef(wantG, wantU, N, F);
      expect(Array.from(await rt.readF32(scales, 0, N))).toEqual(Array.from(ref.scales));
      expect(ref.scales[1]).toBe(0);
      expect(Array.from(await rt.readU32(codes, 0, (N * 2 * F) / 4))).toEqual(Array.from(ref.words));
    });

  it('refuses a call that is not in place', async () => {
    const rt = await testRuntime();
    const [N, F] = [2, 8];
    const b = () => track(rt.createBuffer('workspace', 'b', N * F * 4));
    const [g, u, d, dg, du] = [b(), b(), b(), b(), b()];
    const codes = track(rt.createBuffer('workspace', 'c', N * 2 * F));
    const scales = track(rt.createBuffer('workspace', 's', N * 4));
    expect(() => swigluBackwardQuantized(rt, { label: 'x', gate: g, up: u, dh: d, dgate: dg, dup: du, dims: { N, F }, codes, scales }))
      .toThrow(/runs in place/);
  });
});
