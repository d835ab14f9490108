/**
 * f16 as a compute format of the plan (issue 35): the schema's formats and loss scaling, the
 * presets, the refusal of operand cells an f16 GEMM cannot read, and the path each f16 GEMM
 * resolves to from the device's features. CI's device (SwiftShader) has no shader-f16, so every f16
 * GEMM here resolves to fp32, and the plan and the run's reported paths say why.
 */
import { describe, expect, it } from 'vitest';
import { f16AttentionPath, f16GemmPath, layerCompute, MODEL_RUNS_F16_GEMMS } from '../../src/engine/model/compute-plan';
import { computePaths, gemmPathSummary } from '../../src/engine/model/int8-gemms';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { f16AttnInputSlots } from '../../src/engine/model/f16-operands';
import { F16_ATTN_MAX_PAD_ROWS } from '../../src/engine/kernels/attention/f16/code';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { ComputeSchema, layerScheme, parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { PRESETS } from '../../src/engine/model/config';

const NO_F16 = { shaderF16: false, tensorCores: false };

describe('f16 in the scheme schema', () => {
  it('accepts f16 for each GEMM and the attention, and dynamic loss scaling', () => {
    const s = parseScheme({ name: 'x', layer: { compute: { forward: 'f16', dx: 'f16', dw: 'int8', attention_qk: 'f16', attention_dp: 'f16' } }, loss_scaling: 'dynamic' });
    expect(s.layer.compute).toMatchObject({ forward: 'f16', dx: 'f16', dw: 'int8', attention_qk: 'f16' });
    expect(s.loss_scaling).toBe('dynamic');
    expect(parseScheme({ name: 'y' }).loss_scaling).toBeUndefined();
  });
  it('refuses formats it does not have and unknown loss scaling', () => {
    expect(ComputeSchema.safeParse({ forward: 'bf16' }).success).toBe(false);
    expect(ComputeSchema.safeParse({ dw: 'fp16' }).success).toBe(false);
    expect(() => parseScheme({ name: 'x', loss_scaling: 'static' })).toThrow(/loss_scaling/);
  });
  it('an f16 GEMM executes as fp32 in the model until its path is f16; the request is kept per GEMM', () => {
    const c = layerCompute(ComputeSchema.parse({ forward: 'f16', dx: 'int8', attention_dp: 'f16' }));
    expect(c).toMatchObject({ forward: 'fp32', dx: 'int8', dw: 'fp32', attentionQk: 'fp32', attentionDp: 'fp32' });
    expect(c.f16).toEqual({ forward: true, dx: false, dw: false, attention: true });
    expect(layerCompute(ComputeSchema.parse({ forward: 'int8' })).f16).toBeUndefined();
  });
});

describe('f16 presets', () => {
  it.each(['f16', 'agoq-f16', 'taco-f16', 'int8-f16'])('%s resolves, asks for loss scaling, and on a device without shader-f16 runs fp32 and says so', (name) => {
    const scheme = SCHEME_PRESETS[name];
    expect(scheme.loss_scaling).toBe('dynamic');
    const plan = resolvePlan(PRESETS.micro, 2, 16, { scheme, f16Device: NO_F16 });
    expect(plan.f16).not.toBeNull();
    expect(plan.f16!.resolution.path).toBe('fp32');
    expect(plan.f16!.resolution.why).toMatch(/no shader-f16/);
    expect(plan.f16!.lossScaling).toBe(false); // fp32 gradients need no scaling
    for (const p of plan.f16!.layers) {
      expect(p.attention).toBe('fp32');
      expect(p.note).toMatch(/attention f16 → fp32 attention/);
      if (name !== 'int8-f16') expect([p.forward, p.dx, p.dw, p.note]).toEqual(['fp32', 'fp32', 'fp32', expect.stringMatching(/forward, dx, dw f16 → fp32 \(this device has no shader-f16/)]);
      else expect([p.forward, p.dx, p.dw]).toEqual([null, null, null]); // its GEMMs are INT8
    }
  });
  it('f16: all three GEMMs of every layer f16, autocast\'s saved activations f16, everything else as fp32; agoq-f16 keeps AGoQ storage (attention f16) and gradients, taco-f16 TACO, int8-f16 the INT8 GEMMs', () => {
    const f16 = SCHEME_PRESETS.f16;
    for (let l = 0; l < 2; l++) expect(layerScheme(f16, l).compute).toMatchObject({ forward: 'f16', dx: 'f16', dw: 'f16' });
    expect(f16.grads).toEqual(SCHEME_PRESETS.fp32.grads);
    expect(f16.adam).toEqual(SCHEME_PRESETS.fp32.adam);
    expect(f16.layer.saved.norm_input?.format ?? 'fp32').toBe('fp32');
    expect(f16.layer.saved.qkv_input?.format).toBe('f16');
    const f16Cell = { ...SCHEME_PRESETS.agoq.layer.saved.attn_qkv, format: 'f16' };
    expect(SCHEME_PRESETS['agoq-f16'].layer.saved).toEqual({ ...SCHEME_PRESETS.agoq.layer.saved, attn_qkv: f16Cell, attn_out: f16Cell });
    expect(SCHEME_PRESETS['agoq-f16'].grads).toEqual(SCHEME_PRESETS.agoq.grads);
    expect(SCHEME_PRESETS['taco-f16'].tp).toEqual(SCHEME_PRESETS.taco.tp);
    expect(SCHEME_PRESETS['int8-f16'].layer.compute).toMatchObject({ forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', attention_qk: 'f16' });
  });
  it('the training plan carries the f16 resolution and loss scaling; without device features it says so', () => {
    const plan = resolveTrainingPlan(defaultTrainOptions('micro', { scheme: SCHEME_PRESETS.f16 }));
    expect(plan.f16).toBe(plan.model.f16);
    expect(plan.lossScaling).toBe(false);
    expect(plan.f16!.resolution.why).toMatch(/no device features/);
    const onDevice = resolveTrainingPlan(defaultTrainOptions('micro', { scheme: SCHEME_PRESETS.f16 }), { device: NO_F16 });
    expect(onDevice.f16!.resolution.why).toMatch(/no shader-f16/);
    expect(resolveTrainingPlan(defaultTrainOptions('micro')).f16).toBeNull();
  });
  it('the run\'s reported paths name fp32 for the f16 GEMMs and say why', () => {
    const plan = resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: NO_F16 });
    const paths = computePaths(plan.layers, new Map(), true, plan.f16!.layers.map((p) => p.note));
    expect(paths[0]).toMatchObject({ forward: 'fp32', dx: 'fp32', dw: 'fp32', attention: 'fp32', f16: expect.stringMatching(/no shader-f16/) });
    expect(gemmPathSummary(paths)).toMatch(/fwd fp32, dx fp32, dw fp32 \[forward, dx, dw f16 → fp32 \(this device has no shader-f16/);
  });
  it('a layer whose f16 attention kernels ran reports them (the model records L<l>.attn and L<l>.attnDp), the others fp32', () => {
    const plan = resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: NO_F16 });
    const ran = new Map([['L0.attn', 'f16-tensor-core'], ['L0.attnDp', 'f16-tensor-core']] as const);
    const paths = computePaths(plan.layers, ran, true);
    expect(paths[0]).toMatchObject({ attention: 'f16-tensor-core', attentionDp: 'f16-tensor-core' });
    expect(paths[1]).toMatchObject({ attention: 'fp32', attentionDp: 'fp32' });
    expect(computePaths(plan.layers, ran, false)[0].attentionDp).toBe('none');
  });
});

describe('the f16 GEMM path from the device', () => {
  it('tensor cores, SIMT or fp32 by the features, fp32 under tensor parallelism', () => {
    const runs = { modelRuns: true };
    expect(f16GemmPath({ shaderF16: true, tensorCores: true }, runs)).toEqual({ path: 'f16-tensor-core', why: null });
    expect(f16GemmPath({ shaderF16: true, tensorCores: false }, runs)).toEqual({ path: 'f16-simt', why: null });
    expect(f16GemmPath(NO_F16, runs)).toEqual({ path: 'fp32', why: 'this device has no shader-f16' });
    expect(f16GemmPath({ shaderF16: true, tensorCores: true }, { ...runs, tp: true }).path).toBe('fp32');
    expect(f16GemmPath(null, runs).why).toMatch(/no device features/);
  });
  it('while the model does not run f16 GEMMs, every device resolves to fp32 and says so', () => {
    if (MODEL_RUNS_F16_GEMMS) return;
    expect(f16GemmPath({ shaderF16: true, tensorCores: true })).toEqual({ path: 'fp32', why: expect.stringMatching(/does not run f16 GEMMs yet/) });
  });
});

describe('f16 with operand cells it cannot read', () => {
  it('refuses fake-quantized weights, inputs or output gradients in front of an f16 GEMM, with the fix', () => {
    const q = { format: 'int4', granularity: 'row' } as const;
    const w = parseScheme({ name: 'fw', layer: { weights: q, compute: { forward: 'f16' } } });
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: w })).toThrow(/layer 0 compute: an f16 forward or dX GEMM reads an f16 copy .*set weights to fp32/);
    const x = parseScheme({ name: 'fx', layers: { 1: { gemm_inputs: q, compute: { forward: 'f16' } } } });
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: x })).toThrow(/layer 1 compute: an f16 forward GEMM casts X .*set gemm_inputs to fp32/);
    const g = parseScheme({ name: 'fg', layer: { gemm_output_grads: q, compute: { dw: 'f16' } } });
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: g })).toThrow(/an f16 dW GEMM casts dY .*set gemm_output_grads to fp32/);
    // The same cells in front of fp32 GEMMs are the study's fake quantization and stay allowed.
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: parseScheme({ name: 'ok', layer: { weights: q, compute: { dw: 'f16' } } }) })).not.toThrow();
  });
});

describe('the f16 attention path', () => {
  it('is the tensor-core forward only where a kernel was verified for the model\'s head dim, else fp32 with the reason', () => {
    const dev = { shaderF16: true, tensorCores: true, attentionHeadDims: [32, 64], attentionBackwardHeadDims: [64] };
    const tiny = resolvePlan(PRESETS.tiny, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: dev }); // head dim 32
    expect(tiny.f16!.layers.map((p) => p.attention)).toEqual(Array(6).fill('f16-tensor-core'));
    expect(tiny.f16!.layers[0].note).toMatch(/attention f16 → f16-tensor-core forward, fp32 backward/);
    const both = resolvePlan(PRESETS.tiny, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: { ...dev, attentionBackwardHeadDims: [32] } });
    expect([both.f16!.layers[0].attention, both.f16!.layers[0].attentionBackward]).toEqual(['f16-tensor-core', 'f16-tensor-core']);
    expect(both.f16!.layers[0].note).toMatch(/attention f16 → f16-tensor-core forward, f16-tensor-core backward/);
    const inference = resolvePlan(PRESETS.tiny, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: dev, training: false });
    expect([inference.f16!.layers[0].attention, inference.f16!.layers[0].attentionBackward]).toEqual(['f16-tensor-core', null]);
    const micro = resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: dev }); // head dim 8
    expect(micro.f16!.layers.map((p) => p.attention)).toEqual(['fp32', 'fp32']);
    // The f16 forward's q, k, v copies: a workspace where it runs (B·T rows plus the pad rows its last blocks read), none where it does not;
    // (shareF16 false: the f16 preset's q, k, v cells are not the copies).
    const sep = resolvePlan(PRESETS.tiny, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: dev, shareF16: false });
    const qkv = sep.buffers.find((b) => b.key === 'f16.qkv');
    const s = f16AttnInputSlots(tiny.dims, false);
    expect([qkv?.category, qkv?.bytes, s.k!.offset % 256, s.v!.offset % 256]).toEqual(['workspace', s.bytes, 0, 0]);
    expect(s.q!.size).toBe((tiny.dims.N + F16_ATTN_MAX_PAD_ROWS) * tiny.dims.QC * 2);
    expect([s.q!, s.k!, s.v!].every((x) => x.offset + x.size <= s.bytes) && s.k!.offset >= s.q!.n * 2 && s.v!.offset >= s.k!.offset + s.k!.n * 2).toBe(true);
    expect(micro.buffers.some((b) => b.key === 'f16.qkv')).toBe(false);
    // With the f16 backward, dO's copy too (after v's).
    const bothSep = resolvePlan(PRESETS.tiny, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: { ...dev, attentionBackwardHeadDims: [32] }, shareF16: false });
    const sb = f16AttnInputSlots(both.dims, false, true);
    expect([bothSep.buffers.find((b) => b.key === 'f16.qkv')?.bytes, sb.dO!.offset % 256, sb.dO!.offset >= sb.v!.offset + sb.v!.n * 2]).toEqual([sb.bytes, 0, true]);
    // The f16 preset's q, k, v cells are the attention's inputs (padded as the slots): no f16.qkv for the forward, dO's slot alone for the backward.
    expect(tiny.f16Cells[0].has('q') && tiny.f16Cells[0].has('v')).toBe(true);
    expect(tiny.buffers.find((b) => b.key === 'L0.q.codes')?.bytes).toBe(s.q!.size);
    expect(tiny.buffers.some((b) => b.key === 'f16.qkv')).toBe(false);
    const so = f16AttnInputSlots(both.dims, false, true, false);
    expect([so.q, so.dO!.offset, both.buffers.find((b) => b.key === 'f16.qkv')?.bytes]).toEqual([null, 0, so.dO!.size]);
    expect(micro.f16!.layers[0].note).toMatch(/attention f16 → fp32 attention \(head dim 8: the f16 attention kernel is verified for head dims 32, 64\)/);
    expect(f16AttentionPath({ shaderF16: true, tensorCores: true }, 64).why).toMatch(/no f16 attention kernel passed its check/);
    expect(f16AttentionPath(NO_F16, 64)).toEqual({ path: 'fp32', why: 'this device has no shader-f16', backward: 'fp32' });
    expect(f16AttentionPath(null, 64).why).toMatch(/no device features/);
  });
});
