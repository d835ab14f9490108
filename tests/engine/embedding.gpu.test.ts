import { describe, expect, it } from 'vitest';
import { embeddingBackward, embeddingForward, embeddingWorkspaceBytes } from '../../src/engine/kernels/embedding/embedding';
import { embeddingBackwardRef, embeddingForwardRef } from '../../src/engine/kernels/embedding/embedding.ref';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();

/** Ids with heavy repeats (a "space" token on ~30% of positions) and a few out-of-range values. */
function makeIds(rng: Rng, N: number, V: number, bad: boolean): Int32Array {
  const ids = new Int32Array(N);
  for (let n = 0; n < N; n++) {
    const r = rng.next();
    ids[n] = r < 0.3 ? Math.min(1, V - 1) : rng.int(V);
    if (bad && r > 0.97) ids[n] = [-1, V, V + 17, -1000][n % 4];
  }
  return ids;
}

async function check(N: number, V: number, C: number, o: { accumulate?: boolean; bad?: boolean } = {}): Promise<Float32Array> {
  const rt = await testRuntime();
  const rng = new Rng(N * 7 + V * 3 + C);
  const ids = makeIds(rng, N, V, o.bad ?? true);
  const W = rng.normalArray(V * C);
  const dout = rng.normalArray(N * C);
  const dW0 = o.accumulate ? rng.normalArray(V * C) : new Float32Array(V * C).fill(55);
  const bIds = up(rt, ids);
  const bW = up(rt, W);
  const bOut = up(rt, new Float32Array(N * C).fill(9));
  const bDout = up(rt, dout);
  const bDW = up(rt, dW0);
  const ws = up(rt, new Float32Array(embeddingWorkspaceBytes({ N, V }) / 4));
  const dims = { N, V, C };
  rt.run([
    embeddingForward(rt, { label: 'e', ids: bIds, W: bW, out: bOut, dims }),
    ...embeddingBackward(rt, { label: 'e', ids: bIds, dout: bDout, dW: bDW, workspace: ws, dims, accumulate: o.accumulate }),
  ]);
  expectClose(await rt.readF32(bOut, 0, N * C), embeddingForwardRef(ids, W, N, V, C), { atol: 0, rtol: 0, label: 'out' });
  const dW = await rt.readF32(bDW, 0, V * C);
  expectClose(dW, embeddingBackwardRef(ids, dout, N, V, C, o.accumulate ? dW0 : undefined), { atol: 2e-5 * Math.sqrt(N), rtol: 1e-5, label: 'dW' });
  return dW;
}

describe('embedding GPU vs reference', () => {
  for (const [N, V, C] of [[1, 1, 1], [7, 7, 7], [63, 65, 65], [65, 384, 7], [1000, 65, 384], [1000, 384, 65], [600, 1, 3]]) {
    it(`N=${N} V=${V} C=${C}`, () => check(N, V, C).then(() => undefined));
  }
  it('accumulates into dW (tied embeddings)', () => check(300, 65, 33, { accumulate: true }).then(() => undefined));
  it('2-D grid over (vocab row, column tile) workgroups', async () => {
    setGridMaxX(7);
    await check(200, 65, 130);
  });
  it('dW is bit-reproducible (a fixed summation order)', async () => {
    const a = await check(1000, 65, 65);
    const b = await check(1000, 65, 65);
    expect(Array.from(b)).toEqual(Array.from(a));
  });
  it('the sort is a stable counting sort: offsets per id, tokens ascending within an id', async () => {
    const rt = await testRuntime();
    const N = 700;
    const V = 40;
    const ids = makeIds(new Rng(5), N, V, true);
    const bIds = up(rt, ids);
    const bDout = up(rt, new Float32Array(N));
    const bDW = up(rt, new Float32Array(V));
    const ws = up(rt, new Float32Array(embeddingWorkspaceBytes({ N, V }) / 4));
    rt.run(embeddingBackward(rt, { label: 'e', ids: bIds, dout: bDout, dW: bDW, workspace: ws, dims: { N, V, C: 1 } }));
    const w = await rt.readU32(ws, 0, 2 * V + 1 + N);
    const want: number[] = [];
    const offsets = [0];
    for (let v = 0; v < V; v++) {
      for (let n = 0; n < N; n++) if (ids[n] === v) want.push(n);
      offsets.push(want.length);
    }
    expect(Array.from(w.subarray(0, V + 1))).toEqual(offsets);
    expect(Array.from(w.subarray(2 * V + 1, 2 * V + 1 + want.length))).toEqual(want);
  });
  it('rejects a workspace that is too small', async () => {
    const rt = await testRuntime();
    const small = up(rt, new Float32Array(4));
    const b = up(rt, new Float32Array(100));
    expect(() => embeddingBackward(rt, { label: 'e', ids: b, dout: b, dW: b, workspace: small, dims: { N: 10, V: 5, C: 2 } })).toThrow(/workspace/);
  });
});
