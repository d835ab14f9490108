import { describe, expect, it } from 'vitest';
import { crossEntropyCount, crossEntropyForward, crossEntropyForwardBackward, crossEntropyMean, crossEntropyRows, crossEntropyWorkspaceBytes } from '../../src/engine/kernels/crossentropy/crossentropy';
import { crossEntropyBackwardRef, crossEntropyForwardRef } from '../../src/engine/kernels/crossentropy/crossentropy.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

type Mode = 'separate' | 'inplace' | 'forward';

async function check(N: number, V: number, mode: Mode, o: { scale?: number; ignoreAll?: boolean } = {}): Promise<void> {
  const rt = await testRuntime();
  const rng = new Rng(N * 13 + V);
  const logits = rng.normalArray(N * V, o.scale ?? 3);
  const targets = new Int32Array(N);
  for (let n = 0; n < N; n++) {
    targets[n] = rng.int(V);
    if (o.ignoreAll || (N > 1 && n % 9 === 4)) targets[n] = [-1, -100, V, V + 3][n % 4];
  }
  const bLogits = up(rt, logits);
  const bTargets = up(rt, targets);
  const bLosses = up(rt, new Float32Array(N).fill(7));
  const bLoss = up(rt, new Float32Array(1).fill(7));
  const ws = up(rt, new Float32Array(crossEntropyWorkspaceBytes({ N, V }) / 4));
  const bD = mode === 'separate' ? up(rt, new Float32Array(N * V).fill(7)) : bLogits;
  const args = { label: 'ce', logits: bLogits, targets: bTargets, losses: bLosses, loss: bLoss, workspace: ws, dims: { N, V } };
  rt.run(mode === 'forward' ? crossEntropyForward(rt, args) : crossEntropyForwardBackward(rt, { ...args, dlogits: bD }));
  const f = crossEntropyForwardRef(logits, targets, N, V);
  expectClose(await rt.readF32(bLosses, 0, N), f.losses, { atol: 2e-5, rtol: 2e-5, label: 'losses' });
  expectClose(await rt.readF32(bLoss, 0, 1), [f.loss], { atol: 2e-5, rtol: 2e-5, label: 'loss' });
  const d = await rt.readF32(bD, 0, N * V);
  if (mode === 'forward') {
    expect(Array.from(d)).toEqual(Array.from(logits)); // untouched
  } else {
    expectClose(d, crossEntropyBackwardRef(logits, targets, N, V), { atol: 1e-7, rtol: 1e-4, label: 'dlogits' });
  }
}

describe('cross-entropy GPU vs reference', () => {
  for (const [N, V] of [[1, 1], [1, 7], [7, 7], [63, 65], [65, 384], [1000, 65], [7, 1000]]) {
    it(`N=${N} V=${V}`, () => check(N, V, 'separate'));
  }
  it('dlogits in place over the logits', () => check(65, 384, 'inplace'));
  it('forward only leaves the logits untouched', () => check(63, 65, 'forward'));
  it('large logits stay finite (max-subtracted)', () => check(7, 384, 'separate', { scale: 400 }));
  it('all rows ignored: loss 0 and zero gradient', () => check(7, 65, 'separate', { ignoreAll: true }));
  it('2-D grid over rows', async () => {
    setGridMaxX(6);
    await check(63, 65, 'inplace');
  });
  it('a chunk of rows at a time (each chunk\'s logits in one reused buffer, in place): the same losses, loss and dlogits bits as all rows at once', async () => {
    const rt = await testRuntime();
    const [N, V, R] = [23, 97, 8];
    const rng = new Rng(5);
    const logits = rng.normalArray(N * V, 3);
    const targets = Int32Array.from({ length: N }, (_, n) => (n % 7 === 3 ? -100 : rng.int(V)));
    const run = async (rows: number) => {
      const [bTargets, bLosses, bLoss, ws] = [up(rt, targets), up(rt, new Float32Array(N)), up(rt, new Float32Array(1)), up(rt, new Float32Array(4))];
      const chunk = up(rt, new Float32Array(rows * V));
      const o = { label: 'ce', targets: bTargets, losses: bLosses, loss: bLoss, workspace: ws, dims: { N, V } };
      const grads = new Float32Array(N * V);
      rt.run([crossEntropyCount(rt, o)]);
      for (let r0 = 0; r0 < N; r0 += rows) {
        const n = Math.min(rows, N - r0);
        const l = { buffer: chunk, offset: 0, size: n * V * 4 };
        rt.write(chunk, logits.subarray(r0 * V, (r0 + n) * V));
        rt.run([crossEntropyRows(rt, { ...o, logits: l, dlogits: l, chunk: { row0: r0, rows: n } })]);
        grads.set(await rt.readF32(chunk, 0, n * V), r0 * V);
      }
      rt.run([crossEntropyMean(rt, o)]);
      return { losses: await rt.readF32(bLosses, 0, N), loss: (await rt.readF32(bLoss, 0, 1))[0], grads };
    };
    const [whole, part] = [await run(N), await run(R)];
    expect(part.losses).toEqual(whole.losses);
    expect(part.loss).toBe(whole.loss);
    expect(part.grads).toEqual(whole.grads);
    expectClose(whole.grads, crossEntropyBackwardRef(logits, targets, N, V), { atol: 1e-7, rtol: 1e-4, label: 'dlogits' });
    expect(() => crossEntropyRows(rt, { label: 'ce', logits: up(rt, new Float32Array(V)), targets: up(rt, targets), losses: up(rt, new Float32Array(N)), workspace: up(rt, new Float32Array(4)), dims: { N, V }, chunk: { row0: 20, rows: 4 } }))
      .toThrow(/chunk rows 20\.\.24 lie outside the 23 rows/);
  });

  it('the loss scale (lossScale: the scaler state\'s word 3) multiplies dlogits in the kernel: the unscaled gradient times the scale, bit for bit, in place and separate; losses unchanged', async () => {
    const rt = await testRuntime();
    const [N, V, scale] = [9, 70, 65536];
    const rng = new Rng(6);
    const logits = rng.normalArray(N * V, 3);
    const targets = Int32Array.from({ length: N }, (_, n) => (n === 4 ? -100 : rng.int(V)));
    const state = up(rt, new Float32Array([0, 0, 0, scale, 0, 0, 0, 0]));
    const run = async (scaled: boolean, inplace: boolean) => {
      const [l, d] = [up(rt, logits), up(rt, new Float32Array(N * V))];
      const o = { label: 'ce', targets: up(rt, targets), losses: up(rt, new Float32Array(N)), loss: up(rt, new Float32Array(1)), workspace: up(rt, new Float32Array(4)), dims: { N, V } };
      const rows = crossEntropyRows(rt, { ...o, logits: l, dlogits: inplace ? l : d, lossScale: scaled ? state : undefined });
      expect(rows.label).toBe(scaled ? 'ce.ceFwdBwdS' : 'ce.ceFwdBwd');
      rt.run([crossEntropyCount(rt, o), rows]);
      return { grads: await rt.readF32(inplace ? l : d, 0, N * V), losses: await rt.readF32(o.losses, 0, N) };
    };
    for (const inplace of [true, false]) {
      const [plain, scaled] = [await run(false, inplace), await run(true, inplace)];
      expect(Array.from(scaled.grads)).toEqual(Array.from(plain.grads, (g) => Math.fround(g * scale)));
      expect(scaled.grads.some((g) => g !== 0)).toBe(true);
      expect(scaled.losses).toEqual(plain.losses);
    }
    const s = up(rt, new Float32Array(N * V));
    expect(() => crossEntropyRows(rt, { label: 'ce', logits: s, targets: up(rt, targets), losses: s, workspace: s, dims: { N, V }, lossScale: state })).toThrow(/loss scale without dlogits/);
  });

  it('rejects a dlogits slice of the logits buffer that is not the logits binding', async () => {
    const rt = await testRuntime();
    const b = up(rt, new Float32Array(256));
    const s = up(rt, new Float32Array(4));
    expect(() => crossEntropyForwardBackward(rt, {
      label: 'ce', logits: { buffer: b, offset: 0, size: 256 }, dlogits: { buffer: b, offset: 512, size: 256 },
      targets: s, losses: s, loss: s, workspace: s, dims: { N: 1, V: 64 },
    })).toThrow(/overlaps/);
  });
});
