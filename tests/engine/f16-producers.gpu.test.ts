/**
 * The producers that write the f16 GEMMs' operands themselves (issue 35 item 4): RMSNorm's forward and
 * backward dx, SwiGLU's forward and backward, RoPE's backward each write an f16 copy of their output
 * beside the fp32 one. Checked against the kernels they extend (fp32 bit for bit), the standalone cast
 * of that fp32 output (packed f16, bit for bit: no behaviour change) and the TS reference
 * (quant/f16.ts roundF16, exactly, in the twin's f32 storage); values past 65504 become Inf. Also the
 * fallback (the plain kernel and the cast) where vec4 access does not apply.
 */
import { describe, expect, it } from 'vitest';
import type { Dispatch, Runtime } from '../../src/engine/gpu/runtime';
import { castF16Operand, f16OperandBytes } from '../../src/engine/kernels/matmul-f16/cast';
import { type F16Out, rmsnormBackward, rmsnormForward, rmsnormForwardF16, rmsnormWorkspaceBytes } from '../../src/engine/kernels/rmsnorm/rmsnorm';
import { rope, ropeF16, ropeTablePacked } from '../../src/engine/kernels/rope/rope';
import { swigluBackward, swigluBackwardF16, swigluBackwardStored, swigluForward, swigluForwardF16, swigluForwardStored } from '../../src/engine/kernels/swiglu/swiglu';
import { packF16, unpackF16 } from '../../src/engine/kernels/f16/f16';
import { roundF16 } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { track, up } = trackBuffers();

function randn(rng: Rng, n: number, scale = 1): Float32Array {
  return Float32Array.from({ length: n }, () => (rng.next() * 2 - 1) * scale);
}

const buf = (rt: Runtime, bytes: number) => track(rt.createBuffer('workspace', 'f16prod', bytes));
const out16 = (rt: Runtime, n: number, elem: 'f16' | 'f32'): F16Out => ({ out: buf(rt, f16OperandBytes(n, elem === 'f32')), elem });

/** The f16 copy `h` of fp32 `y` [n] is what the cast makes of y (packed: word for word) and, in the twin, roundF16(y) exactly. */
async function expectCopy(rt: Runtime, y: GPUBuffer, h: F16Out, n: number, what: string) {
  const yv = await rt.readF32(y, 0, n);
  const ref = buf(rt, f16OperandBytes(n, h.elem === 'f32'));
  rt.run([castF16Operand(rt, { label: 'ref', x: y, out: ref, n, elem: h.elem })]);
  const words = Math.ceil(f16OperandBytes(n, h.elem === 'f32') / 4);
  expect(Array.from(await rt.readU32(h.out as GPUBuffer, 0, words)), `${what}: the cast's bits`).toEqual(Array.from(await rt.readU32(ref, 0, words)));
  if (h.elem === 'f32') {
    const got = await rt.readF32(h.out as GPUBuffer, 0, n);
    const bad = Array.from(yv).flatMap((v, i) => (Object.is(got[i], roundF16(v)) || (got[i] === 0 && roundF16(v) === 0) ? [] : [`${i}: ${v} -> ${got[i]}`]));
    expect(bad, `${what}: roundF16`).toEqual([]);
  }
  return yv;
}

/** fp32 outputs a and b agree bit for bit, and the kernels ran (a changed from `before`, zeros where absent: a failed submit runs nothing). */
async function expectSameF32(rt: Runtime, a: GPUBuffer, b: GPUBuffer, n: number, what: string, before: ArrayLike<number> = new Float32Array(n)) {
  const got = await rt.readF32(a, 0, n);
  expect(got.some((v, i) => !Object.is(v, before[i])), `${what}: the kernel wrote its output`).toBe(true);
  expect(Array.from(new Uint32Array(got.buffer)), `${what}: fp32 output bit for bit`).toEqual(Array.from(await rt.readU32(b, 0, n)));
}

describe.each(['f16', 'f32'] as const)('producers writing f16 copies (elem %s)', (elem) => {
  it('RMSNorm forward and backward dx (accumulating), fused and through the fallback; overflow is Inf', async () => {
    const rt = await testRuntime();
    const rng = new Rng(11);
    const N = 6;
    const C = 24;
    const dims = { N, C, eps: 1e-5 };
    const w = randn(rng, C);
    w[3] = 2e5; // y past f16's range in column 3
    const [x, wb, dy] = [up(rt, randn(rng, N * C, 3)), up(rt, w), up(rt, randn(rng, N * C))];
    const [y, yRef, rstd] = [buf(rt, N * C * 4), buf(rt, N * C * 4), buf(rt, N * 4)];
    const fwd = (fused: boolean, y16: F16Out) => rmsnormForwardF16(rt, { label: 'n', x, w: wb, y, rstd, dims, y16, fused });
    const h = out16(rt, N * C, elem);
    const fused = fwd(true, h);
    expect(fused.length).toBe(1);
    rt.run([rmsnormForward(rt, { label: 'n', x, w: wb, y: yRef, rstd, dims }), ...fused]);
    await expectSameF32(rt, y, yRef, N * C, 'forward');
    const yv = await expectCopy(rt, y, h, N * C, 'forward');
    expect(yv[3]).toBeGreaterThan(65520);
    // y16Only: the same f16 copy and rstd, y left alone.
    const [yOnly, rstdOnly, hOnly] = [up(rt, new Float32Array(N * C).fill(7)), buf(rt, N * 4), out16(rt, N * C, elem)];
    const only = rmsnormForwardF16(rt, { label: 'n', x, w: wb, y: yOnly, rstd: rstdOnly, dims, y16: hOnly, y16Only: true });
    expect(only.map((d) => d.label)).toEqual(['n.rmsnormFwdH16']);
    rt.run(only);
    await expectCopy(rt, y, hOnly, N * C, 'forward y16Only');
    expect(Array.from(await rt.readU32(rstdOnly, 0, N)), 'rstd').toEqual(Array.from(await rt.readU32(rstd, 0, N)));
    expect((await rt.readF32(yOnly, 0, N * C)).every((v) => v === 7), 'y unwritten').toBe(true);
    const hf = out16(rt, N * C, elem);
    const fallback = fwd(false, hf);
    expect(fallback.length).toBe(2);
    rt.run(fallback);
    await expectCopy(rt, y, hf, N * C, 'forward fallback');

    const dx0 = randn(rng, N * C);
    const [dx, dxRef] = [up(rt, dx0), up(rt, dx0)];
    const common = { label: 'nb', x, w: wb, rstd, dy, workspace: buf(rt, rmsnormWorkspaceBytes(dims)), dims, accumulate: true };
    const hb = out16(rt, N * C, elem);
    const bwd: Dispatch[] = rmsnormBackward(rt, { ...common, dx, dw: buf(rt, C * 4), dx16: hb });
    expect(bwd.map((d) => d.label)).toContain('nb.rmsnormBwdDxH');
    rt.run([...rmsnormBackward(rt, { ...common, dx: dxRef, dw: buf(rt, C * 4) }), ...bwd]);
    await expectSameF32(rt, dx, dxRef, N * C, 'backward dx', dx0);
    await expectCopy(rt, dx, hb, N * C, 'backward dx');
  });

  it('SwiGLU forward and in-place backward (over up; over dh a block of rows at a time)', async () => {
    const rt = await testRuntime();
    const rng = new Rng(12);
    const N = 4;
    const F = 32; // a block of two rows is 256 bytes: a storage binding's offset alignment
    const n = N * F;
    const g0 = randn(rng, n, 4);
    const u0 = randn(rng, n, 4);
    [g0[5], u0[5]] = [2, 3e5]; // h past f16's range
    const [gate, upB, h, hRef] = [up(rt, g0), up(rt, u0), buf(rt, n * 4), buf(rt, n * 4)];
    const h16 = out16(rt, n, elem);
    const fwd = swigluForwardF16(rt, { label: 's', gate, up: upB, h, dims: { N, F }, h16 });
    expect(fwd.length).toBe(1);
    rt.run([swigluForward(rt, { label: 's', gate, up: upB, h: hRef, dims: { N, F } }), ...fwd]);
    await expectSameF32(rt, h, hRef, n, 'forward');
    expect(Math.abs((await expectCopy(rt, h, h16, n, 'forward'))[5])).toBeGreaterThan(65520);

    // Over up, whole: the plain in-place backward on copies gives the fp32 reference.
    const dh0 = randn(rng, n);
    const [g1, u1, gR, uR, dh] = [up(rt, g0), up(rt, u0), up(rt, g0), up(rt, u0), up(rt, dh0)];
    const [dg16, du16] = [out16(rt, n, elem), out16(rt, n, elem)];
    const o = { label: 'sb', dims: { N, F }, dh };
    rt.run([
      swigluBackward(rt, { ...o, gate: gR, up: uR, dgate: gR, dup: uR }),
      ...swigluBackwardF16(rt, { ...o, gate: g1, up: u1, dgate: g1, dup: u1, dgate16: dg16, dup16: du16 }),
    ]);
    await expectSameF32(rt, g1, gR, n, 'dgate', g0);
    await expectSameF32(rt, u1, uR, n, 'dup', u0);
    await expectCopy(rt, g1, dg16, n, 'dgate');
    await expectCopy(rt, u1, du16, n, 'dup');

    // Over dh, two blocks of two rows (row0 0 and 2) into one pair of whole copies.
    const [g2, dh2, gR2, dhR2] = [up(rt, g0), up(rt, dh0), up(rt, g0), up(rt, dh0)];
    const [bg16, bu16] = [out16(rt, n, elem), out16(rt, n, elem)];
    const blocks: Dispatch[] = [];
    for (const r0 of [0, 2]) {
      const at = (b: GPUBuffer) => ({ buffer: b, offset: r0 * F * 4, size: 2 * F * 4 });
      blocks.push(...swigluBackwardF16(rt, { label: `sb${r0}`, dims: { N: 2, F }, gate: at(g2), up: at(upB), dh: at(dh2), dgate: at(g2), dup: at(dh2), dgate16: bg16, dup16: bu16, row0: r0 }));
    }
    expect(blocks.length).toBe(2);
    rt.run([swigluBackward(rt, { label: 'sbr', dims: { N, F }, gate: gR2, up: upB, dh: dhR2, dgate: gR2, dup: dhR2 }), ...blocks]);
    await expectSameF32(rt, g2, gR2, n, 'blocked dgate', g0);
    await expectSameF32(rt, dh2, dhR2, n, 'blocked dup', dh0);
    await expectCopy(rt, g2, bg16, n, 'blocked dgate');
    await expectCopy(rt, dh2, bu16, n, 'blocked dup');
  });

  it('SwiGLU over gate\'s and up\'s f16 storage: the forward writes it (packF16\'s words) and h16; the backward reads it and writes dgate16, dup16 only', async () => {
    const rt = await testRuntime();
    const rng = new Rng(14);
    const [N, F] = [4, 32];
    const n = N * F;
    const g0 = randn(rng, n, 4);
    const u0 = randn(rng, n, 4);
    [g0[5], u0[5]] = [2, 3e5]; // up past f16's range (Inf in its storage), h too
    const [gate, upB, hRef] = [up(rt, g0), up(rt, u0), buf(rt, n * 4)];
    const words = () => buf(rt, f16OperandBytes(n, false));
    const [gw, uw, gwRef, uwRef] = [words(), words(), words(), words()];
    const h16 = out16(rt, n, elem);
    rt.run([
      swigluForward(rt, { label: 's', gate, up: upB, h: hRef, dims: { N, F } }),
      ...packF16(rt, { label: 'pg', x: gate, words: gwRef, n }), ...packF16(rt, { label: 'pu', x: upB, words: uwRef, n }),
      swigluForwardStored(rt, { label: 's', gate, up: upB, gateWords: gw, upWords: uw, dims: { N, F }, h16 }),
    ]);
    for (const [a, b, what] of [[gw, gwRef, 'gate'], [uw, uwRef, 'up']] as const) {
      const got = await rt.readU32(a, 0, n / 2);
      expect(got.some((v) => v !== 0), `${what}: the kernel wrote its storage`).toBe(true);
      expect(Array.from(got), `${what}'s storage`).toEqual(Array.from(await rt.readU32(b, 0, n / 2)));
    }
    expect(Math.abs((await expectCopy(rt, hRef, h16, n, 'forward h16'))[5])).toBeGreaterThan(65520);

    // Backward: the plain one over the unpacked storage (what the blocked backward reads) is the reference.
    const dh0 = randn(rng, n);
    const [gR, uR, dh] = [buf(rt, n * 4), buf(rt, n * 4), up(rt, dh0)];
    const [dg16, du16] = [out16(rt, n, elem), out16(rt, n, elem)];
    rt.run([
      ...unpackF16(rt, { label: 'ug', words: gw, out: gR, n }), ...unpackF16(rt, { label: 'uu', words: uw, out: uR, n }),
      swigluBackward(rt, { label: 'sb', dims: { N, F }, gate: gR, up: uR, dh, dgate: gR, dup: uR }),
      swigluBackwardStored(rt, { label: 'sb', gateWords: gw, upWords: uw, dh, dims: { N, F }, dgate16: dg16, dup16: du16 }),
    ]);
    expect(Array.from(await rt.readF32(dh, 0, n)), 'dh is only read').toEqual(Array.from(dh0));
    await expectCopy(rt, gR, dg16, n, 'dgate16');
    await expectCopy(rt, uR, du16, n, 'dup16');
    // With dgate and dup in fp32 too (dgate into its buffer, dup over dh): the plain backward's bits.
    const [dgF, dhF, dg16F, du16F] = [buf(rt, n * 4), up(rt, dh0), out16(rt, n, elem), out16(rt, n, elem)];
    const f32 = swigluBackwardStored(rt, { label: 'sb', gateWords: gw, upWords: uw, dh: dhF, dims: { N, F }, dgate16: dg16F, dup16: du16F, dgate: dgF });
    expect(f32.label).toBe('sb.swigluBwdSF');
    rt.run([f32]);
    await expectSameF32(rt, dgF, gR, n, 'fp32 dgate');
    await expectSameF32(rt, dhF, uR, n, 'fp32 dup over dh', dh0);
    await expectCopy(rt, gR, dg16F, n, 'dgate16 (with fp32)');
    await expectCopy(rt, uR, du16F, n, 'dup16 (with fp32)');
    expect(() => swigluBackwardStored(rt, { label: 'odd', gateWords: gw, upWords: uw, dh, dims: { N: 1, F: 6 }, dgate16: dg16, dup16: du16 })).toThrow(/n % 4 == 0/);
  });

  it('RoPE backward (inverse) with two pairs an invocation, and the fallback at a head dim not a multiple of 4', async () => {
    const rt = await testRuntime();
    const rng = new Rng(13);
    for (const D of [8, 6]) {
      const [B, T, H] = [2, 3, 2];
      const n = B * T * H * D;
      const x0 = randn(rng, n, 2);
      x0[1] = 9e4; // past f16's range
      const [x, y, yRef, table] = [up(rt, x0), buf(rt, n * 4), buf(rt, n * 4), up(rt, ropeTablePacked(T, D, 10000))];
      const y16 = out16(rt, n, elem);
      const a = { label: 'r', x, table, B, T, nHeads: H, D, inverse: true };
      const ds = ropeF16(rt, { ...a, y: y, y16 });
      expect(ds.length).toBe(D % 4 === 0 ? 1 : 2);
      rt.run([rope(rt, { ...a, y: yRef }), ...ds]);
      await expectSameF32(rt, y, yRef, n, `D ${D}`);
      await expectCopy(rt, y, y16, n, `D ${D}`);
      // y16Only (forward and inverse): the same f16 copy, y left alone; the fallback writes y.
      for (const inverse of [false, true]) {
        const [yo, yr, h] = [up(rt, new Float32Array(n).fill(7)), buf(rt, n * 4), out16(rt, n, elem)];
        const only = ropeF16(rt, { ...a, inverse, y: yo, y16: h, y16Only: true });
        expect(only.length).toBe(D % 4 === 0 ? 1 : 2);
        rt.run([rope(rt, { ...a, inverse, y: yr }), ...only]);
        await expectCopy(rt, yr, h, n, `D ${D} inverse ${inverse} y16Only`);
        const yv = await rt.readF32(yo, 0, n);
        if (D % 4 === 0) expect(yv.every((v) => v === 7), 'y unwritten').toBe(true);
        else expect(Array.from(yv)).toEqual(Array.from(await rt.readF32(yr, 0, n)));
      }
    }
  });
});
