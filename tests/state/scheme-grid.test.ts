/** The scheme editor's grid logic and the bits-per-element of saved activations. */
import { describe, expect, it } from 'vitest';
import { modelBufferPlan, modelDims, layerStorage } from '../../src/engine/model/llama';
import { PRESETS } from '../../src/engine/model/config';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { layerScheme, parseScheme, savedSpec, SAVED_KINDS } from '../../src/engine/scheme/scheme';
import { cellLabel, commonCell, commonCompute, gemmPaths, parseSchemeText, savedBits, schemePlan, setCell, setCompute } from '../../src/state/scheme-grid';
import { checkRunConfig, DEFAULT_RUN_CONFIG } from '../../src/worker/protocol';

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
    const bf16Weights = parseSchemeText(JSON.stringify({ name: 'x', layer: { weights: { format: 'bf16' } } }));
    expect('error' in bf16Weights && bf16Weights.error).toMatch(/layer\.weights\.format: bf16 and f16 are storage formats for saved activations only/);
    const bf16Saved = parseSchemeText(JSON.stringify({ name: 'x', layer: { saved: { attn_qkv: { format: 'bf16' } } } }));
    expect('scheme' in bf16Saved && cellLabel(savedSpec(bf16Saved.scheme, 0, 'attn_qkv'))).toBe('bf16');
    const f16Saved = parseSchemeText(JSON.stringify({ name: 'x', layer: { saved: { attn_qkv: { format: 'f16' } } } }));
    expect('scheme' in f16Saved && cellLabel(savedSpec(f16Saved.scheme, 0, 'attn_qkv'))).toBe('f16');
    const ok = parseSchemeText(JSON.stringify(agoq));
    expect('scheme' in ok && ok.scheme).toEqual(agoq);
  });
});

describe('saved bits per element', () => {
  it('is 32 for fp32 and matches the model plan\'s saved storage for AGoQ and a mixed grid', () => {
    const cfg = PRESETS.micro;
    expect(savedBits(schemePlan(fp32, cfg, 4, 32))?.overall).toBe(32);
    expect(savedBits(schemePlan(undefined, cfg, 4, 32))?.overall).toBe(32);
    const mixed = setCell(setCell(agoq, 0, 'attn_qkv', 'int8'), 1, 'swiglu', 'fp32');
    for (const s of [agoq, mixed]) {
      // Independent count from the engine's own storage table: codes + scales of every quantized
      // tensor, 32 bits for the rest, over the saved kinds' elements.
      const d = modelDims(cfg, 4, 32);
      const fp = savedBits(schemePlan(fp32, cfg, 4, 32))!;
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
      expect(savedBits(schemePlan(s, cfg, 4, 32))?.overall).toBeCloseTo(bits / n, 6);
    }
    expect(savedBits(schemePlan(agoq, cfg, 4, 32))?.overall).toBeLessThan(16);
    // A bf16 cell: 16 bits per element exactly (two values a word, no scales), labelled bf16.
    const bf = setCell(setCell(fp32, 'all', 'attn_qkv', 'bf16'), 'all', 'attn_out', 'bf16');
    expect(commonCell(bf, cfg.num_hidden_layers, 'attn_qkv')).toBe('bf16');
    expect(savedBits(schemePlan(bf, cfg, 4, 32))?.perKind.attn_qkv).toBe(16);
    expect(savedBits(schemePlan(bf, cfg, 4, 32))?.perKind.attn_out).toBe(16);
    expect(savedBits(schemePlan(SCHEME_PRESETS['agoq-int8'], cfg, 4, 32))?.perKind.attn_qkv).toBe(16);
    expect(SAVED_KINDS.length).toBeGreaterThan(0);
    expect(modelBufferPlan(cfg, 4, 32, { scheme: agoq }).length).toBeGreaterThan(0);
  });
});

describe('scheme grid: compute formats', () => {
  const int8 = SCHEME_PRESETS.int8;

  it('edits one layer or all layers, keeping the other fields and dropping overrides equal to the default', () => {
    const s1 = setCompute(int8, 1, { dw: 'fp32' });
    expect(s1.name).toBe('int8-custom');
    expect(layerScheme(s1, 1).compute).toEqual({ ...int8.layer.compute, dw: 'fp32' });
    expect(layerScheme(s1, 0).compute).toEqual(int8.layer.compute);
    expect(commonCompute(s1, 2, 'dw')).toBeNull();
    expect(commonCompute(s1, 2, 'forward')).toBe('int8');
    // Every layer's dW back to INT8: layer 1's override now equals the default and is dropped.
    const s2 = setCompute(s1, 'all', { dw: 'int8' });
    expect(commonCompute(s2, 2, 'dw')).toBe('int8');
    expect(s2.layers['1']?.compute).toBeUndefined();
    // An 'all' edit of another field reaches a layer's own settings without undoing them.
    const s3 = setCompute(setCompute(int8, 0, { dx: 'fp32' }), 'all', { dw_block: 64 });
    expect(layerScheme(s3, 0).compute).toMatchObject({ dx: 'fp32', dw_block: 64 });
    expect(layerScheme(s3, 1).compute).toMatchObject({ dx: 'int8', dw_block: 64 });
    expect(() => setCompute(int8, 'all', { dw_block: 48 })).toThrow(/power of two/);
    expect(int8.layer.compute.dw).toBe('int8'); // the preset itself is untouched
  });

  it('a storage edit of one layer keeps its compute formats and GEMM operand cells (no defaults in a layer\'s own cells)', () => {
    const s = setCell(int8, 0, 'swiglu', 'int4');
    expect(layerScheme(s, 0).compute).toEqual(int8.layer.compute);
    expect(s.layers['0']).toEqual({ saved: { swiglu: expect.objectContaining({ format: 'int4' }) } });
    const w8 = setCell(SCHEME_PRESETS.w8, 1, 'swiglu', 'int8');
    expect(layerScheme(w8, 1).weights).toEqual(SCHEME_PRESETS.w8.layer.weights);
  });

  it('predicts the GEMM path of each layer as the engine chooses it, with and without tensor cores', () => {
    const micro = PRESETS.micro;
    const f = { attention: 'fp32', attentionDp: 'fp32' };
    expect(gemmPaths(schemePlan(SCHEME_PRESETS.fp32, micro, 2, 8), true)?.[0]).toEqual({ layer: 0, forward: 'fp32', dx: 'fp32', dw: 'fp32', ...f });
    expect(gemmPaths(schemePlan(int8, micro, 2, 8), false)?.[1]).toEqual({ layer: 1, forward: 'int8-dot4', dx: 'int8-dot4', dw: 'int8-dot4', ...f });
    expect(gemmPaths(schemePlan(int8, micro, 2, 8), true)?.[1]).toEqual({ layer: 1, forward: 'int8-tensor-core', dx: 'int8-tensor-core', dw: 'int8-tensor-core', ...f });
    // Blocked dW runs the dot4 blocked kernel even with tensor cores; SwitchBack keeps dW fp32.
    expect(gemmPaths(schemePlan(SCHEME_PRESETS['int8-blockdw'], micro, 2, 16), true)?.[0].dw).toBe('int8-dot4');
    expect(gemmPaths(schemePlan(SCHEME_PRESETS.switchback, micro, 2, 8), true)?.[0]).toMatchObject({ dx: 'int8-tensor-core', dw: 'fp32', attention: 'fp32' });
    // intermediate 68: down_proj's forward and gate/up's dX reduce over K = 68, not a multiple of 16 (dot4 for those).
    const odd = { ...micro, intermediate_size: 68 };
    expect(gemmPaths(schemePlan(int8, odd, 2, 8), true)?.[0]).toEqual({ layer: 0, forward: 'int8-dot4+int8-tensor-core', dx: 'int8-dot4+int8-tensor-core', dw: 'int8-tensor-core', ...f });
    expect(gemmPaths(schemePlan(SCHEME_PRESETS['int8-qk'], micro, 2, 8), true)?.[0].attention).toBe('int8-dot4');
    expect(gemmPaths(schemePlan(SCHEME_PRESETS['int8-qk'], micro, 2, 8), false)?.[0].attention).toBe('int8-dot4');
    expect(gemmPaths(schemePlan(SCHEME_PRESETS['int8-attn'], micro, 2, 8), true)?.[0]).toMatchObject({ attention: 'int8-dot4', attentionDp: 'int8-dot4' });
    // A combination the model cannot run has no paths and no saved bits (the editor shows the engine's reason instead).
    expect(gemmPaths(schemePlan(setCompute(int8, 'all', { dw_block: 256 }), micro, 2, 8), true)).toBeNull();
    expect(savedBits(schemePlan(setCompute(int8, 'all', { dw_block: 256 }), micro, 2, 8))).toBeNull();
  });

  it('refuses a run whose compute formats the model cannot run, with the engine\'s message', () => {
    const bad = parseScheme({ name: 'x', layer: { weights: { format: 'int8', granularity: 'row' }, compute: { forward: 'int8' } } });
    const msg = checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: bad });
    expect(msg).toMatch(/^scheme 'x': compute formats this model cannot run:\n {2}layer 0 compute: .*set the weights cell to fp32/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: setCompute(SCHEME_PRESETS.fp32, 'all', { grad_rounding: 'stochastic' }) })).toMatch(/grad_rounding 'stochastic'.*has none/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, batch: 3, seq: 20, scheme: SCHEME_PRESETS['int8-blockdw'] })).toMatch(/dw_block 32 must divide the tokens per step \(batch·context = 60\)/);
    expect(checkRunConfig({ ...DEFAULT_RUN_CONFIG, scheme: int8 })).toBeNull();
  });
});
