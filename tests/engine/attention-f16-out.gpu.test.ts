/**
 * The attention kernels writing the f16 operands of the next f16 GEMMs (issue 35 item 4): the forward's
 * o (o_proj's X) and the backward's dv (v_proj's dY), beside their fp32 outputs. For the fp32 kernels
 * (row-per-thread; blocked with vec4 and vec2 rows; the dk/dv pass with dq recomputed or dS stored,
 * resident and streamed): the copy is word for word what castF16Operand makes of the fp32 output
 * (packed f16, or the twin's f32: the cases alternate to keep SwiftShader's compiles few), and where
 * `plain` the fp32 output is bit for bit the kernel's without the copy. The f16 kernels' copies are
 * checked by their own verification (checkAttentionF16, checkAttentionBackwardF16: attention-f16.gpu.test).
 */
import { afterEach, describe, expect, it } from 'vitest';
import type { Dispatch, Runtime } from '../../src/engine/gpu/runtime';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward, attnTileOf, type AttnTileTuple } from '../../src/engine/kernels/attention/attention';
import { castF16Operand, type F16Out, f16OperandBytes } from '../../src/engine/kernels/matmul-f16/cast';
import { Rng } from '../../src/engine/util/rng';
import { attentionTestRuntime } from '../helpers/gpu';

const rt = await attentionTestRuntime();
const live: GPUBuffer[] = [];
afterEach(() => live.splice(0).forEach((b) => rt.mem.free(b)));
const up = (x: Float32Array) => {
  const b = rt.upload('workspace', 'attn16.in', x);
  live.push(b);
  return b;
};
const rand = (rng: Rng, n: number, scale = 1) => up(Float32Array.from({ length: n }, () => (rng.next() * 2 - 1) * scale));
const out16 = (n: number, elem: 'f16' | 'f32'): F16Out => ({ out: up(new Float32Array(f16OperandBytes(n, elem === 'f32') / 4)), elem });

/** Runs `make` with the copy (and without it where `plain`), then checks the copy is the cast of the fp32 output y (and y the plain kernel's, bit for bit). */
async function expectFused(r: Runtime, what: string, n: number, elem: 'f16' | 'f32', plain: boolean, make: (y: GPUBuffer, y16?: F16Out) => Dispatch[]) {
  const [y, yRef] = [up(new Float32Array(n).fill(NaN)), up(new Float32Array(n).fill(NaN))];
  const y16 = out16(n, elem);
  const ref16 = out16(n, elem);
  const ds = make(y, y16);
  expect(ds.some((d) => d.label.endsWith('H')), `${what}: the kernel writing the copy ran`).toBe(true);
  r.run([...(plain ? make(yRef) : []), ...ds, castF16Operand(r, { label: 'ref', x: y, out: ref16.out, n, elem })]);
  const got = await r.readU32(y, 0, n);
  expect(Array.from(await r.readF32(y, 0, n)).every(Number.isFinite), `${what}: fp32 output written`).toBe(true);
  if (plain) expect(Array.from(got), `${what}: fp32 output bit for bit`).toEqual(Array.from(await r.readU32(yRef, 0, n)));
  const words = f16OperandBytes(n, elem === 'f32') / 4;
  expect(Array.from(await r.readU32(y16.out as GPUBuffer, 0, words)), `${what}: the cast's bits`).toEqual(Array.from(await r.readU32(ref16.out as GPUBuffer, 0, words)));
}

describe('fp32 attention writing f16 copies', () => {
  it('forward o: row-per-thread and blocked (vec4, vec2 rows)', async () => {
    const rng = new Rng(3);
    const cases: [number, AttnTileTuple, 'f16' | 'f32', boolean][] = [[8, [8, 8, 32], 'f16', true], [8, [16, 16, 64, true], 'f32', false], [6, [16, 16, 64, true], 'f16', false]];
    for (const [D, tile, elem, plain] of cases) {
      const s = { B: 1, T: 19, nH: 2, nKV: 1, D };
      const [q, k, v] = [rand(rng, s.T * s.nH * D, 2), rand(rng, s.T * D), rand(rng, s.T * D)];
      const lse = up(new Float32Array(s.nH * s.T));
      await expectFused(rt, `fwd D${D} ${JSON.stringify(tile)} ${elem}`, s.T * s.nH * D, elem, plain, (o, o16) =>
        attentionForward(rt, { label: 'attn16', ...s, q, k, v, o, lse, tile: attnTileOf(tile), o16 }));
    }
  });

  it('backward dv: dk/dv passes (recompute and stored dS; row-per-thread, resident and streamed)', async () => {
    const rng = new Rng(5);
    const cases: [number, AttnTileTuple, boolean, 'f16' | 'f32', boolean][] = [
      [8, [8, 8, 32], false, 'f32', true], [6, [16, 16, 32, true], true, 'f16', false], [8, [16, 16, 16, true, { chunk: 1 }], false, 'f32', false]];
    for (const [D, tile, stored, elem, plain] of cases) {
      const s = { B: 1, T: 19, nH: 2, nKV: 1, D };
      const nq = s.T * s.nH * D;
      const nk = s.T * D;
      const [q, k, v, o, dO] = [rand(rng, nq), rand(rng, nk), rand(rng, nk), rand(rng, nq), rand(rng, nq)];
      const lse = rand(rng, s.nH * s.T);
      const ws = up(new Float32Array(attentionBackwardWorkspaceBytes(s.B, s.T, s.nH) / 4));
      const [dq, dk] = [up(new Float32Array(nq)), up(new Float32Array(nk))];
      const dsScratch = stored ? up(new Float32Array(4 * s.T * s.T * s.nH)) : undefined;
      await expectFused(rt, `bwd D${D} ${JSON.stringify(tile)}${stored ? ' stored dS' : ''} ${elem}`, nk, elem, plain, (dv, dv16) =>
        attentionBackward(rt, { label: 'attn16', ...s, q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, dsScratch, dqPath: stored ? 'stored' : 'recompute', tiles: { dkdv: attnTileOf(tile), dq: attnTileOf([8, 8, 32]) }, dv16 }));
    }
  });
});
