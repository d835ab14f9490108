import { describe, expect, it } from 'vitest';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { rmsnormBackward, rmsnormForward, rmsnormForwardF16, rmsnormWorkspaceBytes } from '../../src/engine/kernels/rmsnorm/rmsnorm';
import { f16OperandBytes } from '../../src/engine/kernels/matmul-f16/cast';
import { rmsnormBackwardRef, rmsnormForwardRef } from '../../src/engine/kernels/rmsnorm/rmsnorm.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

const eps = 1e-5;

async function check(N: number, C: number, opts: { accumulate?: boolean; accumulateDw?: boolean; vectorize?: boolean } = {}): Promise<void> {
  const rt = await testRuntime();
  const rng = new Rng(N * 1000 + C);
  // A per-row scale so rstd varies over rows; w around 1 like a trained norm.
  const x = new Float32Array(N * C);
  for (let n = 0; n < N; n++) for (let c = 0; c < C; c++) x[n * C + c] = rng.normal() * (0.1 + (n % 5));
  const w = Float32Array.from(rng.normalArray(C, 0.2), (v) => 1 + v);
  const dy = rng.normalArray(N * C);
  const dx0 = opts.accumulate ? rng.normalArray(N * C) : new Float32Array(N * C).fill(123);
  const dw0 = opts.accumulateDw ? rng.normalArray(C) : new Float32Array(C).fill(-7);
  const bx = up(rt, x);
  const bw = up(rt, w);
  const by = up(rt, new Float32Array(N * C));
  const br = up(rt, new Float32Array(N));
  const bdy = up(rt, dy);
  const bdx = up(rt, dx0);
  const bdw = up(rt, dw0);
  const ws = up(rt, new Float32Array(rmsnormWorkspaceBytes({ N, C }) / 4));
  const dims = { N, C, eps };
  rt.run([
    rmsnormForward(rt, { label: 'n', x: bx, w: bw, y: by, rstd: br, dims, vectorize: opts.vectorize }),
    ...rmsnormBackward(rt, { label: 'n', x: bx, w: bw, rstd: br, dy: bdy, dx: bdx, dw: bdw, workspace: ws, dims, ...opts }),
  ]);
  const f = rmsnormForwardRef(x, w, N, C, eps);
  const b = rmsnormBackwardRef(x, w, dy, N, C, eps, opts.accumulate ? dx0 : undefined, opts.accumulateDw ? dw0 : undefined);
  expectClose(await rt.readF32(by, 0, N * C), f.y, { atol: 1e-5, rtol: 1e-4, label: 'y' });
  expectClose(await rt.readF32(br, 0, N), f.rstd, { atol: 1e-6, rtol: 1e-5, label: 'rstd' });
  expectClose(await rt.readF32(bdx, 0, N * C), b.dx, { atol: 1e-5, rtol: 1e-4, label: 'dx' });
  // dw sums N rows of O(1) terms: allow for fp32 summation over N.
  expectClose(await rt.readF32(bdw, 0, C), b.dw, { atol: 1e-5 * Math.sqrt(N), rtol: 1e-4, label: 'dw' });
}

describe('rmsnorm GPU vs reference', () => {
  for (const [N, C] of [[1, 1], [1, 384], [7, 7], [63, 65], [65, 384], [1000, 7], [1000, 65], [300, 384]]) {
    it(`N=${N} C=${C}`, () => check(N, C));
  }
  it('accumulates dx (residual stream) and dw (micro-batches)', async () => {
    await check(65, 65, { accumulate: true, accumulateDw: true });
    await check(65, 384, { accumulate: true, accumulateDw: true }); // vec4 rows
  });
  it('scalar rows where vec4 would fit (vectorize: false) match too', () => check(65, 384, { vectorize: false }));
  it('the forward with the residual copy (resid): x copied bit for bit, y, rstd and y16 as without (fp32 vec4 and scalar, f16 with and without y)', async () => {
    const rt = await testRuntime();
    const rng = new Rng(5);
    for (const [N, C] of [[5, 64], [3, 30]]) {
      const n = N * C;
      const x = rng.normalArray(n);
      x[1] = NaN;
      const [bx, bw] = [up(rt, x), up(rt, Float32Array.from(rng.normalArray(C, 0.2), (v) => 1 + v))];
      const fresh = (k: number) => up(rt, new Float32Array(k).fill(9));
      const dims = { N, C, eps };
      for (const vectorize of [true, false]) {
        const [y, r, yR, rR, xc] = [fresh(n), fresh(N), fresh(n), fresh(N), fresh(n + 4)];
        rt.run([rmsnormForward(rt, { label: 'r', x: bx, w: bw, y: yR, rstd: rR, dims, vectorize }), rmsnormForward(rt, { label: 'r', x: bx, w: bw, y, rstd: r, dims, vectorize, resid: xc })]);
        const got = await rt.readU32(xc, 0, n + 4);
        expect(Array.from(got.subarray(0, n)), `C ${C} vectorize ${vectorize}: x's copy`).toEqual(Array.from(new Uint32Array(x.buffer)));
        expect(Array.from(new Float32Array(got.buffer).subarray(n)), 'only n copied').toEqual([9, 9, 9, 9]);
        expect(Array.from(await rt.readU32(y, 0, n))).toEqual(Array.from(await rt.readU32(yR, 0, n)));
        expect(Array.from(await rt.readU32(r, 0, N))).toEqual(Array.from(await rt.readU32(rR, 0, N)));
      }
      if (C % 4) continue;
      for (const y16Only of [false, true]) {
        const h = (k: number) => up(rt, new Float32Array(f16OperandBytes(k, false) / 4));
        const [y, r, xc, h16, hR] = [fresh(n), fresh(N), fresh(n), h(n), h(n)];
        rt.run([
          ...rmsnormForwardF16(rt, { label: 'r', x: bx, w: bw, y: fresh(n), rstd: fresh(N), dims, y16: { out: hR, elem: 'f16' } }),
          ...rmsnormForwardF16(rt, { label: 'r', x: bx, w: bw, y, rstd: r, dims, y16: { out: h16, elem: 'f16' }, y16Only, resid: xc }),
        ]);
        expect(Array.from(await rt.readU32(xc, 0, n)), `f16 y16Only ${y16Only}: x's copy`).toEqual(Array.from(new Uint32Array(x.buffer)));
        expect(Array.from(await rt.readU32(h16, 0, n / 2))).toEqual(Array.from(await rt.readU32(hR, 0, n / 2)));
      }
    }
  });
  it('row index spans a 2-D grid', async () => {
    setGridMaxX(4);
    await check(63, 33);
    await check(63, 32); // vec4 rows
  });
  it('dw is bit-reproducible', async () => {
    const rt = await testRuntime();
    const N = 1000;
    const C = 65;
    const rng = new Rng(1);
    const bx = up(rt, rng.normalArray(N * C));
    const bw = up(rt, rng.normalArray(C));
    const br = up(rt, new Float32Array(N));
    const bdy = up(rt, rng.normalArray(N * C));
    const bdx = up(rt, new Float32Array(N * C));
    const bdw = up(rt, new Float32Array(C));
    const ws = up(rt, new Float32Array(rmsnormWorkspaceBytes({ N, C }) / 4));
    const dims = { N, C, eps };
    const ds = [
      rmsnormForward(rt, { label: 'n', x: bx, w: bw, y: bdx, rstd: br, dims }),
      ...rmsnormBackward(rt, { label: 'n', x: bx, w: bw, rstd: br, dy: bdy, dx: bdx, dw: bdw, workspace: ws, dims }),
    ];
    rt.run(ds);
    const a = await rt.readF32(bdw, 0, C);
    rt.run(ds);
    const b = await rt.readF32(bdw, 0, C);
    expect(Array.from(b)).toEqual(Array.from(a));
  });
});
