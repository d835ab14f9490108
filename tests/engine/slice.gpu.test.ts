import { beforeAll, describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { gatherColumns, scatterColumns, transposeMatrix } from '../../src/engine/kernels/slice/slice';
import { gatherColumnsRef, scatterColumnsRef, transposeRef } from '../../src/engine/kernels/slice/slice.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

const SENTINEL = -555.5;
// [rows, cols, c0, width]: single row/column, awkward sizes, blocks at either edge, the whole matrix.
const SHAPES: [number, number, number, number][] = [
  [1, 1, 0, 1],
  [7, 3, 1, 2],
  [65, 63, 0, 21],
  [65, 63, 42, 21],
  [3, 300, 17, 257],
  [4, 5, 0, 5],
  [9, 4, 2, 0],
];

/** A buffer holding `data` at a 256-byte offset, sentinels around it; returns the slice. */
function sliced(rt: Runtime, data: Float32Array) {
  const host = new Float32Array(64 + data.length + 64).fill(SENTINEL);
  host.set(data, 64);
  const buffer = rt.upload('workspace', 'slice.test', host);
  return { buffer, offset: 256, size: Math.max(4, data.length * 4) };
}

async function readSlice(rt: Runtime, s: { buffer: GPUBuffer }, n: number): Promise<Float32Array> {
  const all = await rt.readF32(s.buffer);
  expect(all.subarray(0, 64).every((v) => v === SENTINEL) && all.subarray(64 + n, 128 + n).every((v) => v === SENTINEL), 'gaps intact').toBe(true);
  return all.slice(64, 64 + n);
}

describe('column slicing (simulated tensor parallelism)', () => {
  let rt: Runtime;
  beforeAll(async () => {
    rt = await testRuntime();
  });

  it('gatherColumns and scatterColumns (set and +=) match plain loops on slices', async () => {
    const rng = new Rng(21);
    for (const [rows, cols, c0, width] of SHAPES) {
      const tag = `${rows}x${cols} [${c0}, ${c0 + width})`;
      const full = rng.normalArray(rows * cols);
      const shard = rng.normalArray(rows * width);
      const a = sliced(rt, full);
      const g = sliced(rt, new Float32Array(rows * width));
      const s = sliced(rt, shard);
      const d1 = sliced(rt, full);
      const d2 = sliced(rt, full);
      rt.run([
        gatherColumns(rt, { label: 'g', src: a, dst: g, rows, cols, c0, width }),
        scatterColumns(rt, { label: 's', src: s, dst: d1, rows, cols, c0, width }),
        scatterColumns(rt, { label: 'a', src: s, dst: d2, rows, cols, c0, width, accumulate: true }),
      ]);
      expect(Array.from(await readSlice(rt, g, rows * width)), `gather ${tag}`).toEqual(Array.from(gatherColumnsRef(full, rows, cols, c0, width)));
      expect(Array.from(await readSlice(rt, d1, rows * cols)), `scatter ${tag}`).toEqual(
        Array.from(scatterColumnsRef(shard, full, rows, cols, c0, width)),
      );
      // f32 sums of two f32 values are the double sums rounded once.
      expect(Array.from(await readSlice(rt, d2, rows * cols)), `accumulate ${tag}`).toEqual(
        Array.from(Float32Array.from(scatterColumnsRef(shard, full, rows, cols, c0, width, true))),
      );
      for (const b of [a, g, s, d1, d2]) rt.mem.free(b.buffer);
    }
  });

  it('gathering every shard and scattering it back rebuilds the matrix', async () => {
    const rows = 5;
    const cols = 12;
    const full = new Rng(22).normalArray(rows * cols);
    const a = rt.upload('workspace', 'slice.full', full);
    const back = rt.upload('workspace', 'slice.back', new Float32Array(rows * cols));
    const shards = [0, 1, 2].map((k) => rt.createBuffer('workspace', `slice.shard${k}`, rows * 4 * 4));
    rt.run([
      ...shards.map((dst, k) => gatherColumns(rt, { label: `g${k}`, src: a, dst, rows, cols, c0: 4 * k, width: 4 })),
      ...shards.map((src, k) => scatterColumns(rt, { label: `s${k}`, src, dst: back, rows, cols, c0: 4 * k, width: 4 })),
    ]);
    expect(Array.from(await rt.readF32(back))).toEqual(Array.from(full));
    for (const b of [a, back, ...shards]) rt.mem.free(b);
  });

  it('rejects blocks past the last column, short buffers and aliasing', async () => {
    const a = rt.upload('workspace', 'slice.bad', new Float32Array(64));
    const b = rt.upload('workspace', 'slice.bad2', new Float32Array(64));
    expect(() => gatherColumns(rt, { label: 'x', src: a, dst: b, rows: 2, cols: 8, c0: 5, width: 4 })).toThrow(/exceed 8/);
    expect(() => gatherColumns(rt, { label: 'x', src: a, dst: b, rows: 20, cols: 8, c0: 0, width: 2 })).toThrow(/src has 256 bytes/);
    expect(() => scatterColumns(rt, { label: 'x', src: a, dst: { buffer: a, offset: 256 }, rows: 2, cols: 8, c0: 0, width: 2 })).toThrow(
      /different buffers/,
    );
    rt.mem.free(a);
    rt.mem.free(b);
  });

  it('transposeMatrix matches the plain loop: edge tiles, single rows and columns, slices, a 2-D grid', async () => {
    const rng = new Rng(23);
    // Partial tiles on either axis, one row / one column, exact 32-multiples, more than one tile row.
    const shapes: [number, number][] = [[1, 1], [1, 70], [70, 1], [33, 31], [64, 96], [97, 65], [5, 300]];
    for (const [rows, cols] of shapes) {
      for (const gridMax of [null, 2]) {
        setGridMaxX(gridMax);   // 2: the tiles spread over a 2-D grid
        const data = rng.normalArray(rows * cols);
        const a = sliced(rt, data);
        const t = sliced(rt, new Float32Array(rows * cols));
        rt.run([transposeMatrix(rt, { label: 't', src: a, dst: t, rows, cols })]);
        expect(Array.from(await readSlice(rt, t, rows * cols)), `${rows}x${cols} grid ${gridMax}`).toEqual(Array.from(transposeRef(data, rows, cols)));
        rt.mem.free(a.buffer);
        rt.mem.free(t.buffer);
      }
    }
    setGridMaxX(null);
  });

  it('transposeMatrix rejects bad shapes, short buffers and aliasing', async () => {
    const a = rt.upload('workspace', 'slice.badt', new Float32Array(64));
    const b = rt.upload('workspace', 'slice.badt2', new Float32Array(64));
    expect(() => transposeMatrix(rt, { label: 'x', src: a, dst: b, rows: 0, cols: 8 })).toThrow(/rows must be a positive integer/);
    expect(() => transposeMatrix(rt, { label: 'x', src: a, dst: b, rows: 2.5, cols: 8 })).toThrow(/rows must be a positive integer/);
    expect(() => transposeMatrix(rt, { label: 'x', src: a, dst: b, rows: 9, cols: 8 })).toThrow(/src has 256 bytes/);
    expect(() => transposeMatrix(rt, { label: 'x', src: a, dst: { buffer: a, offset: 128 }, rows: 2, cols: 8 })).toThrow(/different buffers/);
    rt.mem.free(a);
    rt.mem.free(b);
  });
});
