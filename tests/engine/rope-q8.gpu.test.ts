/**
 * RoPE with the INT8 codes of every rotated head row (the INT8 attention scores' producer): y as
 * rope's, and codes and scales exactly quantizeRef 'row' of that y, which is what the backward's
 * quantizeHeadsI8 recomputes from the saved y.
 */
import { describe, expect, it } from 'vitest';
import { headCodesLayout, quantizeHeadsI8 } from '../../src/engine/kernels/attention/i8';
import { setGridMaxX } from '../../src/engine/kernels/launch';
import { quantizeRef } from '../../src/engine/kernels/quantize/quantize.ref';
import { rope, ropeQuantized, ropeQuantizedFits, uploadRopeTable } from '../../src/engine/kernels/rope/rope';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('ropeQuantized', () => {
  const cases = [
    { B: 2, T: 5, H: 3, D: 8, tableT: 5 },
    { B: 1, T: 7, H: 2, D: 16, tableT: 12 },
    { B: 1, T: 33, H: 4, D: 64, tableT: 33, gridMaxX: 3 },   // 9 workgroups on a 3 × 3 grid
    { B: 2, T: 3, H: 1, D: 128, tableT: 3 },
  ];
  for (const [i, c] of cases.entries()) {
    it(`B${c.B} T${c.T} H${c.H} D${c.D} (table of ${c.tableT} rows)`, async () => {
      const rt = await testRuntime();
      const rows = c.B * c.T * c.H;
      const n = rows * c.D;
      const rng = new Rng(40 + i);
      // Magnitudes spread over rows, one all-zero row: its scale is 0 and its codes 0.
      const host = rng.normalArray(n).map((v, j) => (Math.floor(j / c.D) === 1 ? 0 : v * (1 + (Math.floor(j / c.D) % 7) * 3)));
      const x = rt.upload('activations', 'x', host);
      const table = uploadRopeTable(rt, 'rq', c.tableT, c.D, 10000);
      const yRef = rt.createBuffer('activations', 'yRef', n * 4);
      const y = rt.createBuffer('activations', 'y', n * 4);
      const codes = rt.createBuffer('workspace', 'codes', n);
      const scales = rt.createBuffer('workspace', 'scales', rows * 4);
      const codes2 = rt.createBuffer('workspace', 'codes2', headCodesLayout(rows, c.D).bytes);
      const shape = { B: c.B, T: c.T, nHeads: c.H, D: c.D, tableT: c.tableT };
      setGridMaxX(c.gridMaxX ?? null);
      const fused = ropeQuantized(rt, { label: 'rq', x, y, table, codes, scales, ...shape });
      setGridMaxX(null);
      rt.run([
        rope(rt, { label: 'r', x, y: yRef, table, ...shape }),
        fused,
        ...quantizeHeadsI8(rt, 'qh', y, rows, c.D, codes2),
      ]);
      const got = await rt.readF32(y, 0, n);
      const want = await rt.readF32(yRef, 0, n);
      for (let j = 0; j < n; j++) expect(Math.abs(got[j] - want[j]), `y[${j}]`).toBeLessThanOrEqual(2e-7 * Math.max(1, Math.abs(want[j])));
      const q = quantizeRef(got, 'int8', { kind: 'row', rowLength: c.D });
      const words = await rt.readU32(codes, 0, n / 4);
      expect(words).toEqual(q.words);
      expect(Array.from(await rt.readF32(scales, 0, rows))).toEqual(Array.from(q.scales));
      expect(words).toEqual(await rt.readU32(codes2, 0, n / 4));
      expect(await rt.readF32(scales, 0, rows)).toEqual(await rt.readF32(codes2, headCodesLayout(rows, c.D).scaleOffset, rows));
      expect((await rt.readF32(scales, 0, rows))[1]).toBe(0);
      for (const b of [x, table, yRef, y, codes, scales, codes2]) rt.mem.free(b);
    });
  }

  it('refuses head dims it does not tile, by name', async () => {
    const rt = await testRuntime();
    expect(ropeQuantizedFits(12)).toBe(false);
    expect(ropeQuantizedFits(24)).toBe(false); // D/4 = 6 does not divide 256
    expect(() => ropeQuantized(rt, { label: 'bad', x: null!, y: null!, table: null!, codes: null!, scales: null!, B: 1, T: 1, nHeads: 1, D: 12 })).toThrow(/D a multiple of 8/);
  });
});
