/**
 * The batched weight quantizers (kernels/weight-codes.ts) against the per-GEMM ones they replace:
 * several tensors of odd shapes and different row lengths in one flat buffer, each entry's codes and
 * scales equal to buildQuantize's int8 'row' (the forward's W) and quantizeColumnsI8's (dX's Wᵀ)
 * code for code, and to the CPU reference; bytes between the entries stay untouched.
 */
import { describe, expect, it } from 'vitest';
import { columnAbsmaxWords, quantizeColumnsI8 } from '../../src/engine/kernels/qgemm/block';
import { buildQuantize } from '../../src/engine/kernels/quantize/quantize';
import {
  type ColCodesEntry, colCodes, colCodesAmaxWords, colCodesTable, type RowCodesEntry, rowCodes, rowCodesTable,
} from '../../src/engine/kernels/weight-codes/weight-codes';
import { weightCodesRef } from '../../src/engine/kernels/weight-codes/weight-codes.ref';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up, track } = trackBuffers();
const align = (n: number, a: number) => Math.ceil(n / a) * a;

/**
 * A flat buffer with the tensors [rows, cols] at offsets of a multiple of 64 floats (as the model's
 * layout: the per-GEMM quantizers bind them as slices) and gaps between; values near rounding boundaries in some rows.
 */
function flat(shapes: [number, number][], rng: Rng): { x: Float32Array; at: number[] } {
  const at: number[] = [];
  let n = 64;
  for (const [r, c] of shapes) {
    at.push(n);
    n = align(n + r * c + 12, 64);
  }
  const x = rng.normalArray(n);
  shapes.forEach(([r, c], i) => {
    const m = x.subarray(at[i], at[i] + r * c);
    m[Math.min(5, m.length - 1)] = 30; // an outlier
    for (let j = 0; j < c; j++) m[j] = 0; // an all-zero first row (s = 0 per row)
    if (r > 2) {
      // Row 2: its absmax A at column 0, the rest within ±3 ulps of (k + ½)·s (s = RN(A/127)), which
      // the division-free codes must redo exactly.
      const A = 2.5;
      const s = Math.fround(A / 127);
      m[2 * c] = A;
      for (let j = 1; j < c; j++) {
        const v = Math.fround((rng.int(200) - 100 + 0.5) * s);
        const b = new Float32Array([Math.max(-A, Math.min(A, v))]);
        new Int32Array(b.buffer)[0] += rng.int(7) - 3;
        m[2 * c + j] = b[0];
      }
    }
  });
  return { x, at };
}

describe('rowCodes: per-row INT8 codes of several tensors in one dispatch', () => {
  it('equals buildQuantize int8 per row on each tensor and quantizeRef', async () => {
    const rt = await testRuntime();
    // Row lengths 4 .. 2564 (past a team's 32 vec4 several times, and not a power of two), 1 .. 37 rows.
    const shapes: [number, number][] = [[3, 12], [37, 36], [5, 260], [1, 4], [9, 2564], [16, 768]];
    const { x, at } = flat(shapes, new Rng(1));
    let q = 0;
    let s = 0;
    const entries: RowCodesEntry[] = shapes.map(([rows, rowLength], i) => {
      const e = { x: at[i], rows, rowLength, q: align(q, 256), s: align(s, 256) };
      q = e.q + rows * rowLength + 256; // a gap after each
      s = e.s + rows * 4 + 256;
      return e;
    });
    const X = up(rt, x);
    const codes = track(rt.createBuffer('workspace', 'codes', q));
    const scales = track(rt.createBuffer('workspace', 'scales', s));
    const table = up(rt, rowCodesTable(entries));
    const ds = rowCodes(rt, { label: 'wc', x: X, entries, table, codes, scales });
    expect(ds).toHaveLength(1);
    rt.run(ds);
    const ref = weightCodesRef(x, { rows: entries }, q, s);
    expect(Array.from(await rt.readU32(codes, 0, q / 4))).toEqual(Array.from(ref.codes));
    expect(Array.from(await rt.readF32(scales, 0, s / 4))).toEqual(Array.from(ref.scales));
    for (const e of entries) {
      const n = e.rows * e.rowLength;
      const k = buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: e.rowLength }, n }, { buffer: X, offset: e.x * 4, size: n * 4 });
      rt.run(k.dispatches);
      expect(Array.from(await rt.readU32(codes, e.q, n / 4)), `codes of [${e.rows}, ${e.rowLength}]`).toEqual(Array.from(await rt.readU32(k.words, 0, n / 4)));
      expect(Array.from(await rt.readF32(scales, e.s, e.rows)), `scales of [${e.rows}, ${e.rowLength}]`).toEqual(Array.from(await rt.readF32(k.scales, 0, e.rows)));
      k.destroy();
    }
  }, 60_000);

  it('strides over the rows and tiles when the grid is capped', async () => {
    const rt = await testRuntime();
    const rowsE: RowCodesEntry[] = [{ x: 0, rows: 41, rowLength: 8, q: 0, s: 0 }, { x: 328, rows: 30, rowLength: 20, q: 512, s: 256 }];
    const colsE: ColCodesEntry[] = [{ x: 0, R: 300, CN: 40, q: 0, s: 0, a: 0 }];
    const x = new Rng(2).normalArray(12_000);
    const X = up(rt, x);
    const codes = track(rt.createBuffer('workspace', 'codes', 12_000));
    const scales = track(rt.createBuffer('workspace', 'scales', 512));
    const amax = track(rt.createBuffer('workspace', 'amax', colCodesAmaxWords(300, 40) * 4));
    rt.run(rowCodes(rt, { label: 'wc', x: X, entries: rowsE, table: up(rt, rowCodesTable(rowsE)), codes, scales, maxWorkgroups: 2 }));
    let ref = weightCodesRef(x, { rows: rowsE }, 1112, 512);
    expect(Array.from(await rt.readU32(codes, 0, 1112 / 4))).toEqual(Array.from(ref.codes));
    expect(Array.from(await rt.readF32(scales, 0, 128))).toEqual(Array.from(ref.scales));
    rt.run(colCodes(rt, { label: 'wc', x: X, entries: colsE, table: up(rt, colCodesTable(colsE)), codes, scales, amax, maxWorkgroups: 2 }));
    ref = weightCodesRef(x, { cols: colsE }, 12_000, 160);
    expect(Array.from(await rt.readU32(codes, 0, 3000))).toEqual(Array.from(ref.codes));
    expect(Array.from(await rt.readF32(scales, 0, 40))).toEqual(Array.from(ref.scales));
  }, 60_000);
});

describe('colCodes: per-input-channel INT8 codes of Wᵀ for several tensors in two dispatches', () => {
  it('equals quantizeColumnsI8 on each tensor and the reference', async () => {
    const rt = await testRuntime();
    // [R, CN]: one partial tile; several tiles of 128 rows with a partial last one and a partial
    // 32-column block; narrow; wide; R = 2·F as gate/up together.
    const shapes: [number, number][] = [[12, 20], [260, 36], [4, 4], [132, 100], [384, 68], [256, 8]];
    const { x, at } = flat(shapes, new Rng(3));
    let q = 0;
    let s = 0;
    let a = 0;
    const entries: ColCodesEntry[] = shapes.map(([R, CN], i) => {
      const e = { x: at[i], R, CN, q: align(q, 256), s: align(s, 256), a };
      q = e.q + R * CN + 256;
      s = e.s + CN * 4 + 256;
      a += colCodesAmaxWords(R, CN);
      return e;
    });
    const X = up(rt, x);
    const codes = track(rt.createBuffer('workspace', 'codes', q));
    const scales = track(rt.createBuffer('workspace', 'scales', s));
    const amax = track(rt.createBuffer('workspace', 'amax', a * 4));
    const ds = colCodes(rt, { label: 'wc', x: X, entries, table: up(rt, colCodesTable(entries)), codes, scales, amax });
    expect(ds).toHaveLength(2);
    rt.run(ds);
    const ref = weightCodesRef(x, { cols: entries }, q, s);
    expect(Array.from(await rt.readU32(codes, 0, q / 4))).toEqual(Array.from(ref.codes));
    expect(Array.from(await rt.readF32(scales, 0, s / 4))).toEqual(Array.from(ref.scales));
    for (const e of entries) {
      const n = e.R * e.CN;
      const c = track(rt.createBuffer('workspace', 'c', n));
      const sc = track(rt.createBuffer('workspace', 'sc', e.CN * 4));
      const am = track(rt.createBuffer('workspace', 'am', columnAbsmaxWords(e.R, e.CN) * 4));
      rt.run(quantizeColumnsI8(rt, { label: 'cq', x: { buffer: X, offset: e.x * 4, size: n * 4 }, R: e.R, CN: e.CN, codes: c, scales: sc, amax: am }).dispatches);
      expect(Array.from(await rt.readU32(codes, e.q, n / 4)), `codes of [${e.R}, ${e.CN}]ᵀ`).toEqual(Array.from(await rt.readU32(c, 0, n / 4)));
      expect(Array.from(await rt.readF32(scales, e.s, e.CN)), `scales of [${e.R}, ${e.CN}]ᵀ`).toEqual(Array.from(await rt.readF32(sc, 0, e.CN)));
    }
  }, 60_000);

  it('rejects shapes the kernels cannot take', () => {
    expect(() => colCodesTable([{ x: 0, R: 6, CN: 8, q: 0, s: 0, a: 0 }])).toThrow(/R 6 must be/);
    expect(() => rowCodesTable([{ x: 2, rows: 1, rowLength: 8, q: 0, s: 0 }])).toThrow(/x 2 must be/);
  });
});
