/** RMSNorm that writes its output's INT8 codes (the INT8 GEMMs' X operand): y as the plain forward, codes as quantizeRef. */
import { describe, expect, it } from 'vitest';
import { rmsnormBackward, rmsnormForward, rmsnormForwardQuantized, rmsnormWorkspaceBytes } from '../../src/engine/kernels/rmsnorm/rmsnorm';
import { quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up, track } = trackBuffers();

describe('rmsnormForwardQuantized', () => {
  it.each([[5, 32, true], [3, 768, true], [4, 36, false]] as const)('N=%i C=%i fused=%s: y bit for bit, codes and scales as quantizeRef', async (N, C, fused) => {
    const rt = await testRuntime();
    const rng = new Rng(N * C);
    const x = rng.normalArray(N * C);
    for (let c = 0; c < C; c++) x[C + c] = 0; // an all-zero row: s = 0, codes 0
    x[2 * C + 1] = 50; // an outlier
    const w = rng.normalArray(C, 0.5);
    const [xb, wb] = [up(rt, x), up(rt, w)];
    const mk = (label: string, bytes: number) => track(rt.createBuffer('workspace', label, bytes));
    const [y0, r0, y, r, codes, scales] = [mk('y0', N * C * 4), mk('r0', N * 4), mk('y', N * C * 4), mk('r', N * 4), mk('codes', N * C), mk('scales', N * 4)];
    const dims = { N, C, eps: 1e-5 };
    rt.run([
      rmsnormForward(rt, { label: 'plain', x: xb, w: wb, y: y0, rstd: r0, dims }),
      ...rmsnormForwardQuantized(rt, { label: 'q', x: xb, w: wb, y, rstd: r, dims, codes, scales, fused }),
    ]);
    const want = await rt.readF32(y0, 0, N * C);
    expect(Array.from(await rt.readF32(y, 0, N * C))).toEqual(Array.from(want));
    expect(Array.from(await rt.readF32(r, 0, N))).toEqual(Array.from(await rt.readF32(r0, 0, N)));
    const ref = quantizeRef(want, 'int8', { kind: 'row', rowLength: C });
    expect(Array.from(await rt.readF32(scales, 0, N))).toEqual(Array.from(ref.scales));
    expect(Array.from(await rt.readU32(codes, 0, (N * C) / 4))).toEqual(Array.from(ref.words));
  });

  it.each([[5, 32, true], [4, 36, false]] as const)('backward N=%i C=%i vec4=%s: dx (accumulated) bit for bit, its codes as quantizeRef', async (N, C, vectorize) => {
    const rt = await testRuntime();
    const rng = new Rng(N * C + 1);
    const x = rng.normalArray(N * C);
    const w = rng.normalArray(C, 0.5);
    const dy = rng.normalArray(N * C, 0.01);
    const dx0 = rng.normalArray(N * C, 0.01);
    for (let c = 0; c < C; c++) dy[c] = 0;
    for (let c = 0; c < C; c++) dx0[c] = 0; // a zero gradient row: s = 0
    const mk = (label: string, bytes: number) => track(rt.createBuffer('workspace', label, bytes));
    const dims = { N, C, eps: 1e-5 };
    const [xb, wb, dyb, rstd, ws, dw] = [up(rt, x), up(rt, w), up(rt, dy), mk('rstd', N * 4), mk('ws', rmsnormWorkspaceBytes(dims)), mk('dw', C * 4)];
    const [dxA, dxB, codes, scales] = [up(rt, dx0), up(rt, dx0), mk('codes', N * C), mk('scales', N * 4)];
    rt.run([
      rmsnormForward(rt, { label: 'f', x: xb, w: wb, y: mk('y', N * C * 4), rstd, dims }),
      ...rmsnormBackward(rt, { label: 'plain', x: xb, w: wb, rstd, dy: dyb, dx: dxA, dw, workspace: ws, dims, accumulate: true, vectorize }),
      ...rmsnormBackward(rt, { label: 'q', x: xb, w: wb, rstd, dy: dyb, dx: dxB, dw, workspace: ws, dims, accumulate: true, vectorize, dxCodes: { codes, scales } }),
    ]);
    const want = await rt.readF32(dxA, 0, N * C);
    expect(Array.from(await rt.readF32(dxB, 0, N * C))).toEqual(Array.from(want));
    const ref = quantizeRef(want, 'int8', { kind: 'row', rowLength: C });
    expect(Array.from(await rt.readF32(scales, 0, N))).toEqual(Array.from(ref.scales));
    expect(Array.from(await rt.readU32(codes, 0, (N * C) / 4))).toEqual(Array.from(ref.words));
  });
});
