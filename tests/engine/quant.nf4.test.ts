/**
 * NF4 (src/engine/quant/nf4.ts): the published table, nearest encoding with bitsandbytes'
 * thresholds, the quantizer's edge rules (zero code 7), and the WGSL twin's constants
 * (shaders/quant/codec.wgsl) equal to the TS ones. The GPU kernels: quant.nf4.gpu.test.ts.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { decodeScalar, encodeScalar, QMAX } from '../../src/engine/quant/formats';
import { decodeNf4, encodeNf4, NF4_TABLE, NF4_THRESHOLDS, NF4_ZERO } from '../../src/engine/quant/nf4';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { Rng } from '../../src/engine/util/rng';

describe('NF4 codec', () => {
  it('the table: 16 sorted fp32 values from −1 to 1 with an exact zero at code 7; thresholds are bitsandbytes\' midpoints', () => {
    expect(NF4_TABLE).toHaveLength(16);
    expect(NF4_TABLE.every((v, i) => Math.fround(v) === v && (i === 0 || v > NF4_TABLE[i - 1]))).toBe(true);
    expect([NF4_TABLE[0], NF4_TABLE[NF4_ZERO], NF4_TABLE[15]]).toEqual([-1, 0, 1]);
    // Spot values of bitsandbytes' dQuantizeNF4 tree (csrc/kernels.cu), as fp32.
    expect(NF4_THRESHOLDS[7]).toBe(Math.fround(0.03979014977812767));
    expect(NF4_THRESHOLDS[14]).toBe(Math.fround(0.8614784181118011));
    expect(NF4_THRESHOLDS[3]).toBe(Math.fround(-0.33967943489551544));
    expect(QMAX.nf4).toBe(1);
  });

  it('encodes to the nearest value (ties to the lower code), decodes every code to its table value', () => {
    for (let c = 0; c < 16; c++) {
      expect(encodeNf4(NF4_TABLE[c])).toBe(c);
      expect(decodeScalar('nf4', c)).toBe(NF4_TABLE[c]);
    }
    for (let i = 0; i < 15; i++) {
      const t = NF4_THRESHOLDS[i];
      expect(encodeNf4(t)).toBe(i);
      expect(encodeNf4(t + 1e-7)).toBe(i + 1);
    }
    const rng = new Rng(5);
    for (let k = 0; k < 2000; k++) {
      const v = Math.fround(rng.next() * 2 - 1);
      const c = encodeNf4(v);
      const best = Math.min(...NF4_TABLE.map((t) => Math.abs(t - v)));
      expect(Math.abs(decodeNf4(c) - v)).toBeLessThanOrEqual(best + 1e-7);
    }
    expect([encodeNf4(NaN), encodeNf4(Infinity), encodeNf4(-0)]).toEqual([7, 7, 7]);
    expect(() => encodeScalar('nf4', 0.3, { u: 0.5 })).toThrow(/nearest/);
  });

  it('quantizeRef: absmax per group maps to ±1, zero groups and non-finite inputs get code 7 (decode to 0)', () => {
    const x = new Float32Array(64);
    for (let i = 0; i < 16; i++) x[i] = (i - 8) * 0.1;
    x[3] = NaN;
    x[4] = -Infinity;
    // x[16..31]: a zero group (G = 16).
    for (let i = 32; i < 64; i++) x[i] = Math.sin(i);
    const q = quantizeRef(x, 'nf4', { kind: 'group', size: 16 });
    expect(Array.from(q.scales)).toEqual([Math.fround(0.8), 0, Math.fround(Math.max(...Array.from(x.subarray(32, 48), Math.abs))), Math.fround(Math.max(...Array.from(x.subarray(48), Math.abs)))]);
    expect(q.words).toHaveLength(8);
    const y = dequantizeRef(q);
    expect([y[0], y[3], y[4], y[8]]).toEqual([Math.fround(-0.8), 0, 0, 0]);
    expect(Array.from(y.subarray(16, 32)).every((v) => Object.is(v, 0))).toBe(true);
    expect(q.words[2]).toBe(0x77777777);
    expect(() => quantizeRef(x, 'nf4', { kind: 'group', size: 16 }, { rounding: 'stochastic' })).toThrow(/nearest/);
  });

  it('reconstructs normal weights better than INT4 (relative RMS error, absmax per 64)', () => {
    const rng = new Rng(11);
    const w = rng.normalArray(64 * 256);
    const err = (f: 'nf4' | 'int4') => {
      const y = dequantizeRef(quantizeRef(w, f, { kind: 'group', size: 64 }));
      let e = 0;
      let r = 0;
      for (let i = 0; i < w.length; i++) {
        e += (w[i] - y[i]) ** 2;
        r += w[i] ** 2;
      }
      return Math.sqrt(e / r);
    };
    const [nf4, int4] = [err('nf4'), err('int4')];
    console.log(`N(0,1) weights, absmax per 64: relative RMS error NF4 ${nf4.toFixed(4)}, INT4 ${int4.toFixed(4)}`);
    expect(nf4).toBeLessThan(0.095);
    expect(int4).toBeGreaterThan(0.1);
  });

  it('the WGSL twin (codec.wgsl NF4_T*, NF4_M*) holds the same table and thresholds', () => {
    const src = readFileSync(new URL('../../shaders/quant/codec.wgsl', import.meta.url), 'utf8');
    const vec = (name: string) => {
      const m = new RegExp(`const ${name} = vec4<f32>\\(([^)]*)\\);`).exec(src);
      if (!m) throw new Error(`${name} not found in codec.wgsl`);
      return m[1].split(',').map((s) => Math.fround(Number(s)));
    };
    expect([0, 1, 2, 3].flatMap((k) => vec(`NF4_T${k}`))).toEqual(NF4_TABLE.map(Math.fround));
    expect([0, 1, 2, 3].flatMap((k) => vec(`NF4_M${k}`))).toEqual([...NF4_THRESHOLDS, 2]);
  });
});
