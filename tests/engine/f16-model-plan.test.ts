/**
 * The model's f16 GEMMs in the plan (CI has no shader-f16, so the plans here are made for a device
 * that has it): every GEMM of the f16 preset takes the device's f16 path, loss scaling turns on with
 * its state buffer, the memory plan counts the operand copies (weights' f16 copy in 256-byte aligned
 * slots, the cast activations) and drops the fp32 forward's transposed-weight scratch; computePaths
 * reports the kernels the model recorded.
 */
import { describe, expect, it } from 'vitest';
import { roundBufferSize } from '../../src/engine/gpu/memory';
import { f16Bytes } from '../../src/engine/kernels/matmul-f16/cast';
import { PRESETS } from '../../src/engine/model/config';
import { f16Operands } from '../../src/engine/model/f16-operands';
import { computePaths } from '../../src/engine/model/int8-gemms';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { F16_COMPUTE_FP32_SAVED } from '../helpers/schemes';

const SIMT = { shaderF16: true, tensorCores: false };
const TC = { shaderF16: true, tensorCores: true };

describe('f16 GEMMs in the model plan', () => {
  it('the f16 preset on a device with shader-f16: f16 paths, loss scaling, the operand buffers', () => {
    const cfg = PRESETS.tiny;
    const plan = resolvePlan(cfg, 4, 128, { scheme: SCHEME_PRESETS.f16, f16Device: TC, linearNnMinRows: 1 });
    expect(plan.f16!.resolution).toEqual({ path: 'f16-tensor-core', why: null });
    for (const p of plan.f16!.layers) expect([p.forward, p.dx, p.dw]).toEqual(['f16-tensor-core', 'f16-tensor-core', 'f16-tensor-core']);
    expect(plan.f16!.lossScaling).toBe(true);
    expect(plan.lossScale).toEqual({ initScale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000 });
    const bytes = (k: string) => plan.buffers.find((b) => b.key === k)?.bytes;
    const { dims: d, layout } = plan;
    const ops = f16Operands(plan.f16!.layers, layout, d)!;
    // Every linear weight of every layer, each slot 256-byte aligned and large enough.
    const linears = layout.views.filter((v) => v.name.startsWith('model.layers.') && v.shape.length === 2);
    expect([...ops.weights.keys()].sort()).toEqual(linears.map((v) => v.name).sort());
    for (const [name, s] of ops.weights) {
      expect(s.offset % 256, name).toBe(0);
      expect(s.n).toBe(layout.byName.get(name)!.size);
    }
    const end = Math.max(...[...ops.weights.values()].map((s) => s.offset + f16Bytes(s.n)));
    expect(ops.weightBytes).toBeGreaterThanOrEqual(end);
    expect(ops.weightBytes).toBeLessThan(end + 256);
    expect(bytes('f16.w')).toBe(ops.weightBytes);
    // f16.a: the widest input, or the backward's dY copies side by side (dgate | dup; dq | dk | dv), 256-byte aligned.
    expect(ops.slots).toEqual({ dup: f16Bytes(d.N * d.F), dk: f16Bytes(d.N * d.QC), dv: f16Bytes(d.N * d.QC) + f16Bytes(d.N * d.KVC) });
    expect(bytes('f16.a')).toBe(Math.max(2 * f16Bytes(d.N * d.F), f16Bytes(d.N * d.QC) + 2 * f16Bytes(d.N * d.KVC)));
    // f16.x: none, the dW GEMMs' X are the f16 saved cells (plan.f16Cells); the widest input where they are not (shareF16 false).
    expect(bytes('f16.x')).toBeUndefined();
    const sep = resolvePlan(cfg, 4, 128, { scheme: SCHEME_PRESETS.f16, f16Device: TC, linearNnMinRows: 1, shareF16: false });
    expect(sep.buffers.find((b) => b.key === 'f16.x')?.bytes).toBe(f16Bytes(d.N * Math.max(d.C, d.F)));
    expect(bytes('lossScale')).toBe(32);
    expect(bytes('wT')).toBeUndefined();
    // The same run on fp32: no f16 buffers, the transposed-weight scratch back.
    const fp32 = resolvePlan(cfg, 4, 128, { scheme: SCHEME_PRESETS.fp32, f16Device: TC, linearNnMinRows: 1 });
    expect(fp32.buffers.some((b) => b.key.startsWith('f16.') || b.key === 'lossScale')).toBe(false);
    expect(fp32.buffers.some((b) => b.key === 'wT')).toBe(true);
  });

  it('the training plan predicts the f16 buffers; forward-only needs no f16.x; no shader-f16 needs none', () => {
    const opts = defaultTrainOptions('micro', { batch: 2, seq: 16, scheme: SCHEME_PRESETS.f16 });
    const withF16 = resolveTrainingPlan(opts, { device: SIMT });
    const without = resolveTrainingPlan(opts, { device: { shaderF16: false, tensorCores: false } });
    expect(withF16.lossScaling).toBe(true);
    expect(without.lossScaling).toBe(false);
    const f16Keys = withF16.buffers.filter((b) => b.key.startsWith('f16.')).map((b) => b.key).sort();
    expect(f16Keys).toEqual(['f16.a', 'f16.w']); // the dW GEMMs' X are f16 saved cells: no f16.x
    const fp32Saved = resolveTrainingPlan({ ...opts, scheme: F16_COMPUTE_FP32_SAVED }, { device: SIMT });
    expect(fp32Saved.buffers.filter((b) => b.key.startsWith('f16.')).map((b) => b.key).sort()).toEqual(['f16.a', 'f16.w', 'f16.x']);
    expect(without.buffers.some((b) => b.key.startsWith('f16.'))).toBe(false);
    expect(withF16.memory.workspace).toBeGreaterThan(0);
    const fwd = resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: SIMT, training: false });
    expect(fwd.buffers.map((b) => b.key).filter((k) => k.startsWith('f16.')).sort()).toEqual(['f16.a', 'f16.w']);
    // Forward only: f16.a holds one GEMM input at a time (no backward dY slots).
    const d = fwd.dims;
    expect(fwd.buffers.find((b) => b.key === 'f16.a')!.bytes).toBe(f16Bytes(d.N * Math.max(d.C, d.F)));
    expect(fwd.lossScale).toBeNull();
  });

  it('base B16xT512 on an H100\'s features: agoq-f16 (lean f16 workspace) within 40 % of fp32\'s memory, the others as before', () => {
    const H100 = { ...TC, attentionHeadDims: [64], attentionBackwardHeadDims: [64] };
    const mib = (scheme: string) => {
      const opts = defaultTrainOptions('base', { batch: 16, seq: 512, scheme: SCHEME_PRESETS[scheme] });
      return Math.round(resolveTrainingPlan(opts, { device: H100 }).memory.total / 2 ** 20 * 10) / 10;
    };
    const fp32 = mib('fp32');
    expect(fp32).toBe(7063.7);
    // f16: no swigluBlock (10 MiB) where the SwiGLU reads gate's and up's f16 storage (plan.swigluHalf).
    expect(mib('f16')).toBe(5108.1);
    expect(mib('int8-f16')).toBe(7377.4);
    expect(mib('agoq-f16')).toBe(2820.9);
    expect(mib('agoq-f16') / fp32).toBeLessThanOrEqual(0.4);
    // The model's buffers without the lean workspace (3,086.1 MiB in the training plan): f16.w all weights (189 MiB)
    // instead of one (3.75 MiB), gate's own fp32 live copy (80 MiB).
    const model = (f16Lean?: boolean) => new Map(resolvePlan(PRESETS.base, 16, 512, { scheme: SCHEME_PRESETS['agoq-f16'], f16Device: H100, f16Lean }).buffers.map((b) => [b.key, roundBufferSize(b.bytes)]));
    const [lean, full] = [model(), model(false)];
    const sum = (m: Map<string, number>) => [...m.values()].reduce((x, y) => x + y, 0);
    expect((sum(full) - sum(lean)) / 2 ** 20).toBeCloseTo(265.25, 2);
    expect([lean.get('f16.w')! / 2 ** 20, full.get('f16.w')! / 2 ** 20, lean.get('live.gate'), full.get('live.gate')! / 2 ** 20]).toEqual([3.75, expect.closeTo(189, 0), undefined, 80]);
  });

  it('computePaths reports the f16 kernels each layer ran (they execute as fp32 in LayerCompute)', () => {
    const plan = resolvePlan(PRESETS.micro, 2, 16, { scheme: SCHEME_PRESETS.f16, f16Device: TC });
    const ran = new Map([
      ['L0.q_proj', 'f16-tensor-core'], ['L0.o_proj', 'f16-simt'], ['L0.q.dx', 'f16-tensor-core'], ['L0.q.dw', 'f16-tensor-core'],
    ] as const);
    const paths = computePaths(plan.layers, ran, true);
    expect(paths[0]).toMatchObject({ forward: expect.stringMatching(/f16-tensor-core/), dx: 'f16-tensor-core', dw: 'f16-tensor-core' });
    expect(paths[0].forward).toMatch(/f16-simt/);
    expect(paths[1]).toMatchObject({ forward: 'fp32', dx: 'fp32', dw: 'fp32' });
  });
});
