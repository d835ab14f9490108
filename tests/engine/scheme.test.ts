import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { modelDims } from '../../src/engine/model/plan';
import { computeProblem, resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, SAVED_KINDS, savedSpec } from '../../src/engine/scheme/scheme';

describe.each(['bf16', 'f16'] as const)('%s: a storage format for saved activations only', (format) => {
  const half = { format } as const;

  it('is accepted in saved-activation cells, the layer default and a layer\'s own', () => {
    const s = parseScheme({ name: 'b', layer: { saved: { attn_qkv: half } }, layers: { 1: { saved: { attn_out: half } } } });
    expect(savedSpec(s, 0, 'attn_qkv').format).toBe(format);
    expect(savedSpec(s, 1, 'attn_out').format).toBe(format);
    expect(savedSpec(s, 0, 'attn_out').format).toBe('fp32');
  });

  it.each([
    ['layer.weights', { layer: { weights: half } }],
    ['layer.gemm_inputs', { layer: { gemm_inputs: half } }],
    ['layer.gemm_output_grads', { layer: { gemm_output_grads: half } }],
    ['layers.0.weights', { layers: { 0: { weights: half } } }],
    ['grads.storage', { grads: { storage: half } }],
    ['grads.wire', { grads: { wire: half } }],
    ['adam.m', { adam: { m: half } }],
    ['adam.v', { adam: { v: half } }],
  ])('is refused in %s, naming the field', (field, raw) => {
    expect(() => parseScheme({ name: 'x', ...raw })).toThrow(new RegExp(`${field.replace(/\./g, '\\.')}\\.format: bf16 and f16 are storage formats for saved activations only`));
  });

  it('is refused as the TP codec (an enum of its own)', () => {
    expect(() => parseScheme({ name: 'x', tp: { degree: 2, codec: format } })).toThrow(/tp\.codec/);
  });

  it('rounds to nearest even only', () => {
    expect(() => parseScheme({ name: 'x', layer: { saved: { attn_qkv: { format, rounding: 'stochastic' } } } })).toThrow(/layer\.saved\.attn_qkv\.rounding: bf16 and f16 storage round to nearest even/);
  });

  it('is accepted in every cell, swiglu included (the blocked SwiGLU backward unpacks up a block of rows at a time)', () => {
    const s = parseScheme({ name: 'sw', layer: { saved: Object.fromEntries(SAVED_KINDS.map((k) => [k, half])) } });
    expect(computeProblem(PRESETS.micro, 2, 32, s)).toBeNull();
    const plan = resolvePlan(PRESETS.micro, 2, 32, { scheme: s });
    expect(plan.saved[1].up).toEqual({ format, n: 2 * 32 * PRESETS.micro.intermediate_size, words: 32 * PRESETS.micro.intermediate_size, scales: 0 });
    // Blocks of rows whose 16-bit words start 256-byte aligned (micro's F = 64: 128 bytes a row).
    expect(plan.swigluRows).toBeLessThan(modelDims(PRESETS.micro, 2, 32).N);
    expect((plan.swigluRows * PRESETS.micro.intermediate_size * 2) % 256).toBe(0);
  });
});

describe('presets with 16-bit attention', () => {
  it('agoq-int8 and agoq-int8-shared keep attention bf16, agoq-f16 f16; agoq keeps it fp32', () => {
    for (const name of ['agoq-int8', 'agoq-int8-shared']) {
      expect([savedSpec(SCHEME_PRESETS[name], 0, 'attn_qkv').format, savedSpec(SCHEME_PRESETS[name], 0, 'attn_out').format], name).toEqual(['bf16', 'bf16']);
    }
    expect([savedSpec(SCHEME_PRESETS['agoq-f16'], 0, 'attn_qkv').format, savedSpec(SCHEME_PRESETS['agoq-f16'], 0, 'attn_out').format]).toEqual(['f16', 'f16']);
    expect(savedSpec(SCHEME_PRESETS.agoq, 0, 'attn_qkv').format).toBe('fp32');
  });

  it('f16 stores what autocast saves in half precision: every kind f16 but the residual stream (norm_input, fp32)', () => {
    const got = Object.fromEntries(SAVED_KINDS.map((k) => [k, savedSpec(SCHEME_PRESETS.f16, 0, k).format]));
    expect(got).toEqual({ ...Object.fromEntries(SAVED_KINDS.map((k) => [k, 'f16'])), norm_input: 'fp32' });
  });
});
