/** SwiGLU that writes its output's INT8 codes (down_proj's X operand): h as the plain forward, codes as quantizeRef. */
import { describe, expect, it } from 'vitest';
import { swigluForward, swigluForwardQuantized } from '../../src/engine/kernels/swiglu';
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
