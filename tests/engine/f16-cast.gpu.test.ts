/**
 * The f32 → f16 operand cast (kernels/matmul-f16/cast.ts) against the exact TS conversion
 * (quant/f16.ts, round to nearest even): pack2x16float needs no shader-f16, so this runs on SwiftShader.
 */
import { describe, expect, it } from 'vitest';
import { castF16Operand } from '../../src/engine/kernels/f16/f16';
import { castF32ToF16, f16Bytes } from '../../src/engine/kernels/matmul-f16/cast';
import { F16_MIN_NORMAL, f32ArrayToF16 } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('castF32ToF16', () => {
  it('matches round-to-nearest f16 (WGSL may round either way: within one ulp, subnormals maybe flushed), Inf and NaN exactly, odd n', async () => {
    const rt = await testRuntime();
    const rng = new Rng(7);
    const special = [0, -0, 1, -1, 0.1, 65504, -65504, 65519, 65520, -65520, 70000, -1e9, Infinity, -Infinity, NaN, 1e-8, -3e-6, 6.2e-5, 2049, 3.14159];
    const n = 1001;
    const x = new Float32Array(n);
    x.set(special);
    for (let i = special.length; i < n; i++) x[i] = (rng.next() * 2 - 1) * 10 ** Math.floor(rng.next() * 8 - 4);
    const xb = rt.upload('workspace', 'cast.x', x);
    const ob = rt.createBuffer('workspace', 'cast.out', f16Bytes(n) + 4);
    try {
      rt.run([castF32ToF16(rt, { label: 'cast', x: xb, out: ob, n })]);
      const words = new Uint32Array(await rt.read(ob, 0, f16Bytes(n)));
      const got = Uint16Array.from({ length: n }, (_, i) => (words[i >> 1] >>> (16 * (i & 1))) & 0xffff);
      const want = f32ArrayToF16(x);
      expect((words[n >> 1] >>> 16) & 0xffff, 'odd n: the last high half').toBe(0);
      const bad: string[] = [];
      for (let i = 0; i < n; i++) {
        const g = got[i];
        const w = want[i];
        if (Number.isNaN(x[i])) {
          if ((g & 0x7c00) !== 0x7c00 || !(g & 0x3ff)) bad.push(`${i}: NaN -> ${g.toString(16)}`);
          continue;
        }
        const exact = !Number.isFinite(x[i]) || Math.abs(x[i]) >= 65504;
        const near = (g & 0x8000) === (w & 0x8000) && Math.abs((g & 0x7fff) - (w & 0x7fff)) <= 1;
        const flushed = Math.abs(x[i]) < F16_MIN_NORMAL && (g & 0x7fff) === 0;
        if (exact ? g !== w : !(near || flushed)) bad.push(`${i}: ${x[i]} -> ${g.toString(16)}, want ${w.toString(16)}`);
      }
      expect(bad).toEqual([]);
      expect([got[7], got[8], got[9], got[12]]).toEqual([0x7bff, 0x7c00, 0xfc00, 0x7c00]); // 65519, 65520, -65520, Inf
    } finally {
      rt.mem.free(xb);
      rt.mem.free(ob);
    }
  });

  it('castF16Operand: castF32ToF16\'s words through the vec4 storage pack (n % 4 == 0), the cast itself for odd counts and the twin', async () => {
    const rt = await testRuntime();
    const rng = new Rng(8);
    const special = [0, -0, 1, 65504, 65519, 65520, -65520, 70000, Infinity, -Infinity, NaN, 1e-8, -3e-6, 6.2e-5];
    const x = Float32Array.from({ length: 1000 }, (_, i) => special[i] ?? (rng.next() * 2 - 1) * 10 ** Math.floor(rng.next() * 8 - 4));
    const xb = rt.upload('workspace', 'cast.x', x);
    const bufs = [xb];
    try {
      for (const [n, elem] of [[1000, 'f16'], [998, 'f16'], [1000, 'f32']] as const) {
        const bytes = elem === 'f32' ? n * 4 : f16Bytes(n);
        const [a, b] = [0, 1].map(() => rt.createBuffer('workspace', 'cast.out', bytes));
        bufs.push(a, b);
        const d = castF16Operand(rt, { label: 'op', x: xb, out: a, n, elem });
        expect(d.label).toBe('op[f32→f16]');
        rt.run([d, castF32ToF16(rt, { label: 'ref', x: xb, out: b, n, elem })]);
        const got = new Uint32Array(await rt.read(a, 0, bytes));
        expect(got.some((w) => w !== 0), `n ${n} ${elem}: written`).toBe(true);
        expect(Array.from(got), `n ${n} ${elem}`).toEqual(Array.from(new Uint32Array(await rt.read(b, 0, bytes))));
      }
    } finally {
      bufs.forEach((b) => rt.mem.free(b));
    }
  });
});
