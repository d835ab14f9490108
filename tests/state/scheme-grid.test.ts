/** The scheme editor's grid logic and the bits-per-element of saved activations. */
import { describe, expect, it } from 'vitest';
import { modelBufferPlan, modelDims, layerStorage } from '../../src/engine/model/llama';
import { PRESETS } from '../../src/engine/model/config';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { savedSpec, SAVED_KINDS } from '../../src/engine/scheme/scheme';
import { cellLabel, commonCell, parseSchemeText, savedBits, setCell } from '../../src/state/scheme-grid';

const fp32 = SCHEME_PRESETS.fp32;
const agoq = SCHEME_PRESETS.agoq;

describe('scheme grid', () => {
  it('edits one layer or all layers, renaming an edited preset', () => {
    const s1 = setCell(fp32, 1, 'swiglu', 'int4');
    expect(s1.name).toBe('fp32-custom');
    expect(cellLabel(savedSpec(s1, 1, 'swiglu'))).toBe('int4');
    expect(cellLabel(savedSpec(s1, 0, 'swiglu'))).toBe('fp32');
    expect(commonCell(s1, 2, 'swiglu')).toBeNull();
    const s2 = setCell(s1, 'all', 'swiglu', 'int8');
    expect(commonCell(s2, 2, 'swiglu')).toBe('int8');
    expect(s2.name).toBe('fp32-custom');
    expect(savedSpec(s2, 1, 'swiglu')).toMatchObject({ format: 'int8', granularity: 'group', group: 128 });
    // The preset itself is untouched.
    expect(savedSpec(fp32, 1, 'swiglu').format).toBe('fp32');
  });

  it('labels cells outside the grid formats in full', () => {
    expect(cellLabel({ format: 'fp8-e4m3', granularity: 'row', group: 128, rounding: 'nearest' })).toBe('fp8-e4m3/row');
    expect(cellLabel({ format: 'int4', granularity: 'group', group: 64, rounding: 'stochastic' })).toBe('int4/group64/sr');
  });

  it('parses JSON text into a scheme or readable errors', () => {
    expect(parseSchemeText('{')).toHaveProperty('error');
    const bad = parseSchemeText(JSON.stringify({ name: 'x', layer: { saved: { swiglu: { format: 'int3' } } } }));
    expect('error' in bad && bad.error).toMatch(/swiglu/);
    const ok = parseSchemeText(JSON.stringify(agoq));
    expect('scheme' in ok && ok.scheme).toEqual(agoq);
  });
});

describe('saved bits per element', () => {
  it('is 32 for fp32 and matches the model plan\'s saved storage for AGoQ and a mixed grid', () => {
    const cfg = PRESETS.micro;
    expect(savedBits(fp32, cfg, 4, 32).overall).toBe(32);
    expect(savedBits(undefined, cfg, 4, 32).overall).toBe(32);
    const mixed = setCell(setCell(agoq, 0, 'attn_qkv', 'int8'), 1, 'swiglu', 'fp32');
    for (const s of [agoq, mixed]) {
      // Independent count from the engine's own storage table: codes + scales of every quantized
      // tensor, 32 bits for the rest, over the saved kinds' elements.
      const d = modelDims(cfg, 4, 32);
      const fp = savedBits(fp32, cfg, 4, 32);
      let bits = 0;
      let n = 0;
      for (let l = 0; l <= cfg.num_hidden_layers; l++) {
        const st = layerStorage(d, s, l);
        const sizes: Record<string, number> = { xIn: d.N * d.C, h1: d.N * d.C, q: d.N * d.C, k: d.N * d.KVC, v: d.N * d.KVC, o: d.N * d.C, xMid: d.N * d.C, h2: d.N * d.C, gate: d.N * d.F, up: d.N * d.F, act: d.N * d.F, xFinal: d.N * d.C, hF: d.N * d.C };
        const keys = l < cfg.num_hidden_layers ? ['xIn', 'h1', 'q', 'k', 'v', 'o', 'xMid', 'h2', 'gate', 'up', 'act'] : ['xFinal', 'hF'];
        for (const k of keys) {
          const q = st[k as keyof typeof st];
          bits += q ? (q.words + q.scales) * 32 : sizes[k] * 32;
          n += sizes[k];
        }
      }
      expect(fp.overall).toBe(32);
      expect(savedBits(s, cfg, 4, 32).overall).toBeCloseTo(bits / n, 6);
    }
    expect(savedBits(agoq, cfg, 4, 32).overall).toBeLessThan(16);
    expect(SAVED_KINDS.length).toBeGreaterThan(0);
    expect(modelBufferPlan(cfg, 4, 32, { scheme: agoq }).length).toBeGreaterThan(0);
  });
});
