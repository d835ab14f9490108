/**
 * The resolved plan (plan/run-plan.ts) against the scheme it resolves: the fields the model reads
 * instead of probing its buffers agree with the buffer list, for every preset, training or not.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { expectedComputePaths } from '../../src/engine/model/int8-gemms';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { isFp32, layerScheme, parseScheme, type Scheme } from '../../src/engine/scheme/scheme';

describe('resolvePlan', () => {
  it.each(Object.keys(SCHEME_PRESETS))('%s: fake-quant copies, storage and wire formats follow the scheme', (name) => {
    const scheme = SCHEME_PRESETS[name];
    for (const training of [true, false]) {
      const p = resolvePlan(PRESETS.micro, 2, 16, { scheme, training });
      const keys = new Set(p.buffers.map((b) => b.key));
      expect(keys.has('wq'), 'wq').toBe(p.fakeQuant.weights);
      expect(keys.has('aq'), 'aq').toBe(p.fakeQuant.inputs);
      expect(keys.has('gq'), 'gq').toBe(p.fakeQuant.grads);
      expect(keys.has('grads'), 'fp32 grads').toBe(training && p.grads === null);
      expect(p.layers).toHaveLength(PRESETS.micro.num_hidden_layers);
      p.layers.forEach((lp, l) => {
        const ls = layerScheme(scheme, l);
        const c = ls.compute;
        // An f16 GEMM executes as fp32 until its path is an f16 one; the f16 request is kept in compute.f16.
        const x = (f: typeof c.forward) => (f === 'f16' ? 'fp32' : f);
        expect(lp).toMatchObject({
          weights: ls.weights, gemmInputs: ls.gemm_inputs, gemmOutputGrads: ls.gemm_output_grads,
          compute: { forward: x(c.forward), dx: x(c.dx), dw: x(c.dw), dwBlock: c.dw_block, gradRounding: c.grad_rounding, attentionQk: x(c.attention_qk), attentionDp: x(c.attention_dp) },
        });
        const f16 = { forward: c.forward === 'f16', dx: c.dx === 'f16', dw: c.dw === 'f16', attention: c.attention_qk === 'f16' || c.attention_dp === 'f16' };
        expect(lp.compute.f16).toEqual(Object.values(f16).some(Boolean) ? f16 : undefined);
      });
      // INT8 operand buffers exactly where some layer's GEMM is INT8 (dX and dW only with a backward).
      const rows = p.layers.some((l) => l.compute.forward === 'int8' || (training && l.compute.dx === 'int8'));
      const dw = training && p.layers.some((l) => l.compute.dw === 'int8');
      expect(p.int8).toEqual({ rows, dw });
      // W's codes per GEMM in i8.w, or per step in wcodes.* (the scheme's weight_codes).
      const perStep = rows && scheme.weight_codes === 'per-step';
      expect(p.weightCodes).toBe(perStep ? 'per-step' : 'per-gemm');
      expect(['i8.a', 'i8.as', 'i8.w', 'i8.ws'].map((k) => keys.has(k)), 'INT8 row operands').toEqual([rows, rows, rows && !perStep, rows && !perStep]);
      expect(['wcodes.rows', 'wcodes.cols'].map((k) => keys.has(k)), 'per-step weight codes').toEqual([perStep, perStep && training]);
      expect(['i8.gt', 'i8.gts', 'i8.xt', 'i8.xts'].map((k) => keys.has(k)), 'INT8 dW operands').toEqual([dw, dw, dw, dw]);
      // Q's and K's codes where some layer's attention scores are INT8 (the forward quantizes them too), dO's and V's where its dP is.
      const qk = p.layers.some((l) => l.compute.attentionQk === 'int8');
      const dp = p.layers.some((l) => l.compute.attentionDp === 'int8');
      expect(['i8.qc', 'i8.kc', 'i8.oc', 'i8.vc'].map((k) => keys.has(k)), 'INT8 attention operands').toEqual([qk, qk, dp, dp]);
      expect(p.fakeQuant.weights).toBe(p.layers.some((l) => !isFp32(l.weights)));
      expect(p.grads !== null).toBe(training && !isFp32(scheme.grads.storage));
      // Only training saves activations; every saved tensor's codes and scales (bf16/f16: codes, two values a word, no scales) are in the buffer list.
      p.saved.forEach((st, l) => {
        if (!training) expect(st).toEqual({});
        for (const [key, q] of Object.entries(st)) {
          expect(keys.has(`L${l}.${key}.codes`), `L${l}.${key}.codes`).toBe(true);
          const half = q.format === 'bf16' || q.format === 'f16';
          expect(keys.has(`L${l}.${key}.scales`), `L${l}.${key}.scales`).toBe(!half);
          if (half) expect(p.buffers.find((b) => b.key === `L${l}.${key}.codes`)!.bytes, `L${l}.${key} ${q.format} bytes`).toBe(Math.ceil(q.n / 2) * 4);
        }
      });
      expect(p.wire.tp).toEqual(scheme.tp.degree > 1 ? scheme.tp : null);
      expect(p.wire.dp.format).toBe('fp32');
    }
  });
});

describe('INT8 attention scores (compute.attention_qk)', () => {
  const qk = (extra: object = {}) => parseScheme({ name: 'qk', layer: { compute: { attention_qk: 'int8' } }, ...extra });
  it('plans Q and K codes per (token, head): N·nH·D and N·nKV·D bytes, then a scale per row from a 256-byte boundary', () => {
    const p = resolvePlan(PRESETS.micro, 2, 16, { scheme: qk() });
    const bytes = (key: string) => p.buffers.find((b) => b.key === key)?.bytes;
    // micro: 4 query heads, 2 KV heads of 8; N = 32 tokens.
    expect([bytes('i8.qc'), bytes('i8.kc'), bytes('i8.oc')]).toEqual([32 * 32 + 32 * 4 * 4, 512 + 32 * 2 * 4, undefined]);
    // dot4 with or without tensor cores (attention-i8.ts says why).
    expect(expectedComputePaths(p, true).map((l) => l.attention)).toEqual(['int8-dot4', 'int8-dot4']);
    expect(expectedComputePaths(p, true).map((l) => l.attentionDp)).toEqual(['fp32', 'fp32']);
    // INT8 dP too: dO's codes as Q's, V's as K's; no backward, no dP.
    const dp = resolvePlan(PRESETS.micro, 2, 16, { scheme: parseScheme({ name: 'dp', layer: { compute: { attention_qk: 'int8', attention_dp: 'int8' } } }) });
    expect(['i8.oc', 'i8.vc'].map((k) => dp.buffers.find((b) => b.key === k)?.bytes)).toEqual([bytes('i8.qc'), bytes('i8.kc')]);
    expect(expectedComputePaths(dp, false).map((l) => l.attentionDp)).toEqual(['int8-dot4', 'int8-dot4']);
    const inference = resolvePlan(PRESETS.micro, 2, 16, { scheme: dp.scheme, training: false });
    expect(expectedComputePaths(inference, false).map((l) => l.attentionDp)).toEqual(['none', 'none']);
  });
  it('refuses what it cannot run, by name: tensor parallelism, a head dim not a multiple of 4, INT8 dP without INT8 scores', () => {
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: qk({ tp: { degree: 2, codec: 'fp32', group: 128 } }) })).toThrow(/INT8 attention scores are not implemented with tensor parallelism/);
    expect(() => resolvePlan({ ...PRESETS.micro, hidden_size: 24, intermediate_size: 48 }, 2, 16, { scheme: qk() })).toThrow(/head_dim = 6 is not a multiple of 4/);
    const dpOnly = parseScheme({ name: 'dp', layer: { compute: { attention_dp: 'int8' } } });
    expect(() => resolvePlan(PRESETS.micro, 2, 16, { scheme: dpOnly })).toThrow(/attention_dp 'int8' runs in the INT8-score dK\/dV kernel; set attention_qk to 'int8' too/);
  });
  it('rejects an unknown format in the scheme', () => {
    expect(() => parseScheme({ name: 'bad', layer: { compute: { attention_qk: 'int4' } } })).toThrow(/attention_qk/);
    expect(() => parseScheme({ name: 'bad', layer: { compute: { attention_dp: 'fp8' } } })).toThrow(/attention_dp/);
  });
});

describe('gate_proj and up_proj dX as one INT8 GEMM over K = 2F (gateUpDx)', () => {
  // Per GEMM: W's codes in the shared i8.w, whose size these check.
  const perGemm = (s: Scheme) => parseScheme({ ...s, weight_codes: 'per-gemm' });
  const plan = (intermediate_size: number, hidden_size = 32, scheme = SCHEME_PRESETS.int8, training = true) =>
    resolvePlan({ ...PRESETS.micro, intermediate_size, hidden_size }, 2, 16, { scheme: perGemm(scheme), training });
  const bytes = (p: ReturnType<typeof plan>, key: string) => p.buffers.find((b) => b.key === key)?.bytes;

  it('where the SwiGLU backward writes the codes: INT8 dX rounding to nearest, weights back to back', () => {
    const p = plan(64);
    expect(p.gateUpDx).toEqual([true, true]);
    // i8.a holds [N, 2F] codes, i8.w the [C, 2F] codes of [Wgate ; Wup]ᵀ.
    expect([bytes(p, 'i8.a'), bytes(p, 'i8.w')]).toEqual([32 * 128, 32 * 128]);
    expect(plan(64, 32, SCHEME_PRESETS.int8, false).gateUpDx).toEqual([false, false]);
    const sr = parseScheme({ name: 'sr', layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', grad_rounding: 'stochastic' } } });
    expect(plan(64, 32, sr).gateUpDx).toEqual([false, false]);
    expect(plan(64, 32, SCHEME_PRESETS.switchback).gateUpDx).toEqual([true, true]);
    expect(plan(64, 32, SCHEME_PRESETS.fp32).gateUpDx).toEqual([false, false]);
    // F·C = 800 floats is not a multiple of the 64-float alignment: up_proj does not follow gate_proj directly.
    const apart = plan(20, 40);
    expect(apart.gateUpDx).toEqual([false, false]);
    expect([bytes(apart, 'i8.a'), bytes(apart, 'i8.w')]).toEqual([32 * 40, 40 * 40]);
  });

  it('the predicted dX path follows K = 2F (tensor cores need K % 16 == 0)', () => {
    // F = 24: alone K = 24 runs dot4 on a tensor-core device, together K = 48 tensor cores.
    const p = plan(24);
    expect(p.gateUpDx).toEqual([true, true]);
    expect(expectedComputePaths(p, true)[0].dx).toBe('int8-tensor-core');
    const two = resolvePlan({ ...PRESETS.micro, intermediate_size: 24 }, 2, 16, { scheme: SCHEME_PRESETS.int8, fuseGateUpDx: false });
    expect(two.gateUpDx).toEqual([false, false]);
    expect(expectedComputePaths(two, true)[0].dx).toBe('int8-dot4+int8-tensor-core');
  });
});
