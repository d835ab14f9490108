/**
 * QLoRA's plan (engine/lora/qlora/plan.ts) without a GPU: the base's block linears leave `weights`
 * for their codes and scales, so the planned weights shrink to what INT4/INT8 costs; groups follow
 * each row's width; and the codec is idempotent on the base it dequantizes (a checkpoint holds the
 * dequantized base, and a resumed run quantizes it back to the same codes).
 */
import { describe, expect, it } from 'vitest';
import { dequantizeRowGroupsRef, quantizeRowGroupsRef } from '../../../src/engine/kernels/qgemm/qgemm.ref';
import { PRESETS } from '../../../src/engine/model/config';
import { initParams, paramLayout, unflatten } from '../../../src/engine/model/params';
import { defaultQloraSpec, resolveQloraPlan } from '../../../src/engine/lora/qlora/plan';
import { defaultLoraSpec } from '../../../src/engine/lora/spec';
import { resolvePlan } from '../../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { F16_COMPUTE_FP32_SAVED } from '../../helpers/schemes';

const sum = (p: ReturnType<typeof resolvePlan>, cat: string) => p.buffers.filter((b) => b.category === cat).reduce((s, b) => s + b.bytes, 0);

describe('QLoRA plan', () => {
  it('prices the block linears as codes and scales instead of fp32', () => {
    const cfg = PRESETS.small;
    const lora = defaultLoraSpec(8);
    const p16 = resolvePlan(cfg, 4, 64, { lora });
    const p4 = resolvePlan(cfg, 4, 64, { lora, qlora: defaultQloraSpec('int4') });
    const p8 = resolvePlan(cfg, 4, 64, { lora, qlora: defaultQloraSpec('int8') });
    const q = p4.qlora!;
    const linear = q.linears.reduce((s, l) => s + l.rows * l.cols, 0);
    expect(q.linears).toHaveLength(7 * cfg.num_hidden_layers);
    expect(q.linears.every((l) => l.G === 64)).toBe(true);
    // fp32 base − linears + INT4 codes (½ byte) + a 4-byte scale per 64.
    const lw = sum(p16, 'weights');
    expect(sum(p4, 'weights')).toBe(lw - (paramLayout(cfg).totalFloats - q.dense.totalFloats) * 4 + linear / 2 + linear / 16);
    expect(sum(p8, 'weights')).toBe(lw - (paramLayout(cfg).totalFloats - q.dense.totalFloats) * 4 + linear + linear / 16);
    // NF4: the same nibbles and fp32 scales as INT4 (no double quantization of the scales), buffer for buffer.
    const pn = resolvePlan(cfg, 4, 64, { lora, qlora: defaultQloraSpec('nf4') });
    expect(pn.buffers.map((b) => [b.key, b.bytes])).toEqual(p4.buffers.map((b) => [b.key, b.bytes]));
    expect(p4.buffers.find((b) => b.key === 'wT')).toBeUndefined();
  });

  it('uses gcd(group, width) where the group does not divide a row (micro: 32)', () => {
    const p = resolveQloraPlan(PRESETS.micro, defaultQloraSpec('int4'));
    expect(new Set(p.linears.map((l) => `${l.cols}:${l.G}`))).toEqual(new Set(['32:32', '64:64']));
  });

  it('refuses INT8 compute and the study\'s fake-quantized weights over the quantized base, and QLoRA without LoRA', () => {
    const cfg = PRESETS.micro;
    const o = { lora: defaultLoraSpec(2), qlora: defaultQloraSpec('int4') };
    expect(() => resolvePlan(cfg, 2, 16, { ...o, scheme: SCHEME_PRESETS.int8 })).toThrow(/asks layer 0 for INT8 forward\/dX compute/);
    expect(() => resolvePlan(cfg, 2, 16, { ...o, scheme: SCHEME_PRESETS.w4 })).toThrow(/also fake-quantizes layer 0's weights/);
    expect(() => resolvePlan(cfg, 2, 16, { qlora: o.qlora })).toThrow(/goes with LoRA adapters/);
    expect(resolvePlan(cfg, 2, 16, { ...o, scheme: SCHEME_PRESETS.agoq }).qlora).not.toBeNull();
  });

  it('f16 compute adds the activations\' f16 scratch and the loss scale only: the base is dequantized to f16 into qlora.w, no f16 copy', () => {
    const o = { lora: defaultLoraSpec(8), qlora: defaultQloraSpec('int4') };
    // f16 compute alone: the f16 preset's 16-bit saved activations would add their codes and live copies.
    const f16 = { scheme: F16_COMPUTE_FP32_SAVED, f16Device: { shaderF16: true, tensorCores: false } };
    const fp32 = resolvePlan(PRESETS.small, 4, 64, o);
    const q16 = resolvePlan(PRESETS.small, 4, 64, { ...o, ...f16 });
    const l16 = resolvePlan(PRESETS.small, 4, 64, { lora: o.lora, ...f16 });
    const before = new Map(fp32.buffers.map((b) => [b.key, b.bytes]));
    const added = q16.buffers.filter((b) => before.get(b.key) !== b.bytes).map((b) => b.key);
    expect(added.sort()).toEqual(['f16.a', 'lossScale']);
    expect(q16.buffers.length).toBe(fp32.buffers.length + 2);
    // LoRA over an fp32 base keeps an f16 copy of every block linear; QLoRA's f16 weight is one linear in qlora.w.
    expect(l16.buffers.find((b) => b.key === 'f16.w')!.bytes).toBeGreaterThanOrEqual(2 * q16.qlora!.linears.reduce((s, l) => s + l.rows * l.cols, 0));
    expect(q16.buffers.find((b) => b.key === 'qlora.w')!.bytes).toBe(4 * q16.qlora!.maxFloats);
    // Without shader-f16 the f16 GEMMs resolve to fp32: the plan is the fp32 one's.
    const noF16 = resolvePlan(PRESETS.small, 4, 64, { ...o, scheme: SCHEME_PRESETS.f16 });
    expect(noF16.buffers.filter((b) => b.key.startsWith('f16.'))).toEqual([]);
  });

  it('quantizes its own dequantized base back to the same codes and scales', () => {
    const cfg = PRESETS.tiny;
    const layout = paramLayout(cfg);
    const params = unflatten(initParams(cfg, layout, 3), layout);
    for (const format of ['int4', 'nf4', 'int8'] as const) {
      for (const l of resolveQloraPlan(cfg, defaultQloraSpec(format)).linears.slice(0, 7)) {
        const a = quantizeRowGroupsRef(params.get(l.name)!, l.rows, l.cols, format, l.G);
        const b = quantizeRowGroupsRef(dequantizeRowGroupsRef(a.codes, a.scales, l.rows, l.cols, format, l.G), l.rows, l.cols, format, l.G);
        expect(Buffer.from(b.codes.buffer).equals(Buffer.from(a.codes.buffer)), `${format} ${l.name} codes`).toBe(true);
        expect(Buffer.from(b.scales.buffer).equals(Buffer.from(a.scales.buffer)), `${format} ${l.name} scales`).toBe(true);
      }
    }
  });
});
