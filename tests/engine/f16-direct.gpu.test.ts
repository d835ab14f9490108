/**
 * f16 producers that skip what nothing reads in fp32 (issue 35). The SwiGLU over gate's and up's f16
 * storage (RunPlan.swigluHalf): where an f16 layer stores gate and up f16 and nothing reads h, dgate or
 * dup in fp32, its forward writes their storage itself (no packs) and its backward reads it (no unpack of
 * gate, no blocks of rows with up's unpacks, no `swigluBlock`). RMSNorm's h1, h2 and RoPE's q, k, dq, dk
 * written as their f16 copies alone (RunPlan.f16Only). On SwiftShader through the f32 twin with the
 * emulated f16 attention, a micro f16 step is bit for bit the step with the packs, the blocked backward
 * and the fp32 outputs (swigluHalf: false, f16Only: false).
 */
import { describe, expect, it } from 'vitest';
import { defaultLoraSpec, initLoraTensors, loraAdapters } from '../../src/engine/lora/spec';
import { RefLoraTrainer } from '../../src/engine/lora/lora-train.ref';
import { flatten } from '../../src/engine/model/params';
import { Rng } from '../../src/engine/util/rng';
import { PRESETS } from '../../src/engine/model/config';
import { LlamaGpu } from '../../src/engine/model/llama';
import { resolvePlan, type RunPlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { attentionTestRuntime } from '../helpers/gpu';
import { expectSameStep, maxRel } from '../helpers/compare';
import { f16TwinMicro, twinStep } from '../helpers/model';

const rt = await attentionTestRuntime();
const micro = f16TwinMicro(13, 31);
const { cfg, B, T, layout, params, tokens, DEV, F16_ATTENTION } = micro;

const plan = (o: { swigluHalf?: boolean; f16Only?: boolean; swigluBlockRows?: number } = {}) => resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.f16, f16Device: DEV, f16Twin: true, ...o });

const step = (p: RunPlan) => twinStep(rt, micro, p);

describe('the SwiGLU over f16 storage (f16, f32 twin)', () => {
  it('the plan: every layer under f16, none where dY or h is read in fp32 or gate/up are not f16; no swigluBlock', () => {
    const p = plan();
    expect(p.swigluHalf).toEqual([true, true]);
    const keys = (q: RunPlan) => q.buffers.map((b) => b.key);
    expect(keys(p)).not.toContain('swigluBlock');
    const off = plan({ swigluHalf: false });
    expect(off.swigluHalf).toEqual([false, false]);
    expect(keys(off)).toContain('swigluBlock');
    // Everything else the same buffers.
    expect(p.buffers).toEqual(off.buffers.filter((b) => b.key !== 'swigluBlock'));
    const at = (scheme: keyof typeof SCHEME_PRESETS, o: object = {}) => resolvePlan(PRESETS.base, 16, 512, { scheme: SCHEME_PRESETS[scheme], f16Device: DEV, ...o }).swigluHalf;
    expect(at('f16').every(Boolean)).toBe(true);
    // LoRA whose adapters read f16 cells (no dropout) too; INT8 GEMMs (int8-f16), gate/up below 16 bits (agoq-f16), fp32,
    // no backward, checkpointing, LoRA with dropout (its mask applies to fp32 x): the old path.
    expect(at('f16', { lora: defaultLoraSpec(4) }).every(Boolean)).toBe(true);
    for (const s of ['int8-f16', 'agoq-f16', 'fp32'] as const) expect(at(s).some(Boolean), s).toBe(false);
    expect(at('f16', { training: false }).some(Boolean)).toBe(false);
    expect(at('f16', { checkpointActivations: true }).some(Boolean)).toBe(false);
    expect(at('f16', { lora: defaultLoraSpec(4, { dropout: 0.1 }) }).some(Boolean)).toBe(false);
    // No f16 path on the device: fp32 GEMMs.
    expect(resolvePlan(PRESETS.base, 16, 512, { scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: false, tensorCores: false } }).swigluHalf.some(Boolean)).toBe(false);
  });

  it('the plan: RMSNorm and RoPE outputs left unwritten in fp32 where nothing reads them', () => {
    expect(plan().f16Only.map((s) => [...s].sort())).toEqual([0, 1].map(() => ['dk', 'dq', 'h1', 'h2', 'k', 'q']));
    expect(plan({ f16Only: false }).f16Only.every((s) => s.size === 0)).toBe(true);
    const at = (scheme: keyof typeof SCHEME_PRESETS, o: object = {}) => resolvePlan(PRESETS.base, 16, 512, { scheme: SCHEME_PRESETS[scheme], f16Device: DEV, ...o }).f16Only[0];
    // No f16 attention on the device: q, k are no cells.
    expect([...at('f16')].sort()).toEqual(['dk', 'dq', 'h1', 'h2']);
    expect([...at('f16', { f16Device: { ...DEV, attentionHeadDims: [64], attentionBackwardHeadDims: [64] } })].sort()).toEqual(['dk', 'dq', 'h1', 'h2', 'k', 'q']);
    // int8-f16: INT8 GEMMs; agoq-f16: h1, h2 stored below 16 bits (no cells); LoRA: h1, h2 (its adapters read their cells),
    // dq, dk where no adapter on q or k reads them in fp32; LoRA with dropout (fp32 x for the mask), checkpointing: none.
    expect(at('int8-f16').size).toBe(0);
    expect([...at('agoq-f16')].sort()).toEqual(['dk', 'dq']);
    expect([...at('f16', { lora: defaultLoraSpec(4) })].sort()).toEqual(['h1', 'h2']);
    expect([...at('f16', { lora: defaultLoraSpec(4, { targets: ['v', 'o', 'down'] }) })].sort()).toEqual(['dk', 'dq', 'h1', 'h2']);
    expect(at('f16', { lora: defaultLoraSpec(4, { dropout: 0.1 }) }).size).toBe(0);
    expect(at('f16', { checkpointActivations: true }).size).toBe(0);
  });

  it('a step is bit for bit the step with the packs, the blocked backward and the fp32 outputs; one pass each way', async () => {
    // The reference's backward in blocks of rows (micro's default is one block of all rows).
    const ref = await step(plan({ swigluHalf: false, f16Only: false, swigluBlockRows: (B * T) / 2 }));
    const got = await step(plan());
    try {
      expectSameStep(got, ref);
      expect(got.grads.some((g) => g !== 0)).toBe(true);
      const per = (labels: string[]) => labels.filter((l) => l.startsWith('L0.') && /swiglu|\.(gate|up)\.f16/.test(l));
      expect(per(got.labels)).toEqual(['L0.swiglu.swigluFwdS', 'L0.swiglu.bwd.swigluBwdS']);
      const norms = (labels: string[]) => labels.filter((l) => l.startsWith('L0.') && /(norm|rope)/.test(l) && !/bwd\.(rmsnorm|norm)/.test(l));
      expect(norms(got.labels)).toEqual(['L0.norm1.rmsnormFwdH16', 'L0.rope_q.ropeH16', 'L0.rope_k.ropeH16', 'L0.norm2.rmsnormFwdH16', 'L0.rope_q.bwd.ropeBwdH16', 'L0.rope_k.bwd.ropeBwdH16']);
      expect(norms(ref.labels)).toEqual(['L0.norm1.rmsnormFwdH', 'L0.rope_q.ropeH', 'L0.rope_k.ropeH', 'L0.norm2.rmsnormFwdH', 'L0.rope_q.bwd.ropeBwdH', 'L0.rope_k.bwd.ropeBwdH']);
      expect(per(ref.labels)).toEqual([
        'L0.gate.f16.pack', 'L0.up.f16.pack', 'L0.swiglu.swigluFwd', 'L0.swiglu[f32→f16]', 'L0.gate.f16.unpack',
        'L0.swiglu.bwd.rows0.unpack', 'L0.swiglu.bwd.rows0.swigluBwdH', 'L0.swiglu.bwd.rows16.unpack', 'L0.swiglu.bwd.rows16.swigluBwdH',
      ]);
    } finally {
      ref.model.destroy();
      got.model.destroy();
    }
  }, 300_000);
});

describe('the SwiGLU over f16 storage with fp32 dgate and dup (LoRA under f16, f32 twin)', () => {
  it('the adapters read h1\'s, h2\'s, act\'s cells; the SwiGLU gate\'s and up\'s storage both ways, writing dgate, dup for them: their gradients bit for bit the packs\' and blocks\'', async () => {
    const spec = defaultLoraSpec(4, { alpha: 8 });
    const p = (o: { swigluHalf?: boolean; f16Only?: boolean; swigluBlockRows?: number } = {}) => resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.f16, f16Device: DEV, f16Twin: true, lora: spec, ...o });
    // The forward over the storage too (the adapters read act's and h2's cells), the backward writing dgate and dup for gate's and up's adapters.
    expect([p().swigluHalf, p().swigluBwdHalf]).toEqual([[true, true], [true, true]]);
    expect(p().buffers.map((b) => b.key)).not.toContain('swigluBlock');
    expect(p({ swigluHalf: false }).swigluBwdHalf).toEqual([false, false]);
    // No adapter on gate or up: nothing reads dgate or dup in fp32.
    expect(resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.f16, f16Device: DEV, f16Twin: true, lora: defaultLoraSpec(4, { targets: ['q', 'down'] }) }).swigluBwdHalf).toEqual([false, false]);
    // Not where the f16-only backward applies, nor under INT8 gate/up dX (int8-f16 stores gate and up fp32 anyway).
    expect(plan().swigluBwdHalf).toEqual([false, false]);
    // Random B (PEFT's zero B would leave dA zero).
    const adapters = initLoraTensors(cfg, spec, 3);
    const r = new Rng(4);
    for (const ad of loraAdapters(cfg, spec)) adapters.set(ad.b, r.uniformArray(ad.out * spec.rank, -0.05, 0.05));
    const run = async (q: RunPlan) => {
      const model = new LlamaGpu(rt, q, { f16Attention: F16_ATTENTION });
      model.uploadParams(params);
      model.writeTrainable('weights', flatten(adapters, model.trainable.layout));
      model.setBatch(tokens);
      rt.run([...model.forward, ...model.backward]);
      const out = { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads: await rt.readF32(model.b('lora.grads')), labels: [...model.forward, ...model.backward].map((d) => d.label) };
      model.destroy();
      return out;
    };
    const ref = await run(p({ swigluHalf: false, f16Only: false, swigluBlockRows: (B * T) / 2 }));
    const got = await run(p());
    expectSameStep(got, ref);
    expect(got.grads.some((g) => g !== 0)).toBe(true);
    // Against the float64 reference (merged weights): f16 rounding of the operands only (the adapters' GEMMs over f16 x, as PEFT's autocast runs them).
    const f64 = new RefLoraTrainer(cfg, spec, new Map(layout.views.map((v) => [v.name, params.subarray(v.offset, v.offset + v.size)])), adapters);
    const loss64 = f64.lossAndGrad(tokens, B, T);
    expect(Math.abs(got.loss - loss64) / loss64).toBeLessThan(1e-4);
    const scale = p().lossScale!.initScale;
    const lay = p().lora!.layout;
    for (const v of lay.views) expect(maxRel(got.grads.subarray(v.offset, v.offset + v.size).map((g) => g / scale), f64.grads.get(v.name)!), v.name).toBeLessThan(5e-3);
    const per = (labels: string[]) => labels.filter((l) => l.startsWith('L0.') && /swiglu|(gate|up)\.f16\.(un)?pack|norm\d\.rmsnorm/.test(l));
    expect(per(got.labels)).toEqual(['L0.norm1.rmsnormFwdH16', 'L0.norm2.rmsnormFwdH16', 'L0.swiglu.swigluFwdS', 'L0.swiglu.bwd.swigluBwdSF']);
    expect(per(ref.labels)).toEqual([
      'L0.norm1.rmsnormFwdH', 'L0.norm2.rmsnormFwdH', 'L0.gate.f16.pack', 'L0.up.f16.pack', 'L0.swiglu.swigluFwd', 'L0.swiglu[f32→f16]',
      'L0.gate.f16.unpack', 'L0.swiglu.bwd.rows0.unpack', 'L0.swiglu.bwd.rows0.swigluBwdH', 'L0.swiglu.bwd.rows16.unpack', 'L0.swiglu.bwd.rows16.swigluBwdH',
    ]);
  }, 300_000);
});
