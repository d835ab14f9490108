import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { computeProblem, resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, savedSpec } from '../../src/engine/scheme/scheme';

const bf16 = { format: 'bf16' } as const;

describe('bf16: a storage format for saved activations only', () => {
  it('is accepted in saved-activation cells, the layer default and a layer\'s own', () => {
    const s = parseScheme({ name: 'b', layer: { saved: { attn_qkv: bf16 } }, layers: { 1: { saved: { attn_out: bf16 } } } });
    expect(savedSpec(s, 0, 'attn_qkv').format).toBe('bf16');
    expect(savedSpec(s, 1, 'attn_out').format).toBe('bf16');
    expect(savedSpec(s, 0, 'attn_out').format).toBe('fp32');
  });

  it.each([
    ['layer.weights', { layer: { weights: bf16 } }],
    ['layer.gemm_inputs', { layer: { gemm_inputs: bf16 } }],
    ['layer.gemm_output_grads', { layer: { gemm_output_grads: bf16 } }],
    ['layers.0.weights', { layers: { 0: { weights: bf16 } } }],
    ['grads.storage', { grads: { storage: bf16 } }],
    ['grads.wire', { grads: { wire: bf16 } }],
    ['adam.m', { adam: { m: bf16 } }],
    ['adam.v', { adam: { v: bf16 } }],
  ])('is refused in %s, naming the field', (field, raw) => {
    expect(() => parseScheme({ name: 'x', ...raw })).toThrow(new RegExp(`${field.replace(/\./g, '\\.')}\\.format: bf16 is a storage format for saved activations only`));
  });

  it('is refused as the TP codec (an enum of its own)', () => {
    expect(() => parseScheme({ name: 'x', tp: { degree: 2, codec: 'bf16' } })).toThrow(/tp\.codec/);
  });

  it('rounds to nearest even only', () => {
    expect(() => parseScheme({ name: 'x', layer: { saved: { attn_qkv: { format: 'bf16', rounding: 'stochastic' } } } })).toThrow(/layer\.saved\.attn_qkv\.rounding: bf16 rounds to nearest even/);
  });

  it('is refused at plan time in the swiglu cell (the blocked SwiGLU backward dequantizes quantized codes)', () => {
    const s = parseScheme({ name: 'sw', layers: { 1: { saved: { swiglu: bf16 } } } });
    expect(computeProblem(PRESETS.micro, 2, 16, s)).toMatch(/layer 1 saved\.swiglu: bf16 is not supported there/);
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: s })).toThrow(/layer 1 saved\.swiglu: bf16/);
    // Forward only nothing is saved, so nothing is refused.
    expect(computeProblem(PRESETS.micro, 2, 16, s, false)).toBeNull();
  });

  it('agoq-int8 and agoq-int8-shared keep attention bf16; agoq keeps it fp32', () => {
    for (const name of ['agoq-int8', 'agoq-int8-shared']) {
      expect([savedSpec(SCHEME_PRESETS[name], 0, 'attn_qkv').format, savedSpec(SCHEME_PRESETS[name], 0, 'attn_out').format], name).toEqual(['bf16', 'bf16']);
    }
    expect(savedSpec(SCHEME_PRESETS.agoq, 0, 'attn_qkv').format).toBe('fp32');
  });
});
