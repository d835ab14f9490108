/**
 * QLoRA (engine/lora/qlora): the weight-only GEMM's accumulate against its reference; the base
 * quantized on upload equals the codec's reference (codes, scales, and the dequantized base read
 * back); a QLoRA model equals LoRA over that dequantized base (loss, adapter gradients), keeps no
 * fp32 copy of its block linears (smaller planned and allocated weights), leaves the codes unchanged
 * while training, and its loss falls; the same with an NF4 base (one step). Under f16 compute (the f16 GEMMs' f32 twin) it equals LoRA-f16
 * over that base: each linear dequantized to f16 right before its GEMM equals the base's f16 copy.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { qgemmWeightOnly } from '../../../src/engine/kernels/qgemm/qgemm';
import { dequantizeRowGroupsRef, qgemmWeightOnlyRef, quantizeRowGroupsRef } from '../../../src/engine/kernels/qgemm/qgemm.ref';
import { resolvePlan } from '../../../src/engine/plan/run-plan';
import { resolveTrainingPlan } from '../../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { initParams, paramLayout, unflatten } from '../../../src/engine/model/params';
import { defaultTrainOptions, type TrainOptions } from '../../../src/engine/train/options';
import { CharTokenizer } from '../../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../../src/engine/train/trainer';
import type { QloraBase } from '../../../src/engine/lora/qlora/base';
import { defaultQloraSpec, type QloraSpec, resolveQloraPlan } from '../../../src/engine/lora/qlora/plan';
import { defaultLoraSpec, initLoraTensors, loraAdapters, type LoraSpec } from '../../../src/engine/lora/spec';
import { Rng } from '../../../src/engine/util/rng';
import { testRuntime } from '../../helpers/gpu';
import { maxRel } from '../../helpers/compare';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 20_000);
const tok = CharTokenizer.fromText(text);

function options(lora: LoraSpec, qlora?: QloraSpec): TrainOptions {
  const o = defaultTrainOptions('micro', { steps: 6, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize } });
  return { ...o, lora, ...(qlora ? { qlora } : {}) };
}


/** A QLoRA model's codes and scales of one base linear (LinearGemms.qbase, private to the model). */
function codesOf(t: Trainer, name: string): Promise<{ codes: Uint32Array; scales: Float32Array }> {
  return (t.model as unknown as { g: { qbase: QloraBase } }).g.qbase.codes(name);
}

/**
 * The GPU's quantized base is the codec's (codes and scales of `name`), reads back as the dequantized
 * reference, and a step's loss and adapter gradients equal LoRA's over that dequantized base.
 */
async function expectLoraOverDequantized(q: Trainer, l: Trainer, base: Map<string, Float32Array>, deq: Map<string, Float32Array>,
  lin: { name: string; rows: number; cols: number; G: number }, format: 'int4' | 'nf4' | 'int8'): Promise<{ lossQ: number; codes: { codes: Uint32Array; scales: Float32Array } }> {
  const ref = quantizeRowGroupsRef(base.get(lin.name)!, lin.rows, lin.cols, format, lin.G);
  const codes = await codesOf(q, lin.name);
  expect(Array.from(codes.codes)).toEqual(Array.from(ref.codes));
  expect(Array.from(codes.scales)).toEqual(Array.from(ref.scales));
  const readBack = await q.parameters();
  for (const [k, v] of deq) expect(maxRel(readBack.get(k)!, v), k).toBe(0);
  const batch = q.batchAt(0);
  const lossQ = await q.computeGradients(batch);
  const lossL = await l.computeGradients(batch);
  expect(Math.abs(lossQ - lossL) / lossL, `loss ${lossQ} vs LoRA ${lossL}`).toBeLessThan(1e-6);
  const gq = unflatten(await q.model.readTrainable('grads'), q.model.trainable.layout);
  const gl = unflatten(await l.model.readTrainable('grads'), l.model.trainable.layout);
  let worst = 0;
  for (const [k, v] of gl) worst = Math.max(worst, maxRel(gq.get(k)!, v));
  console.log(`QLoRA ${format} micro: loss ${lossQ} vs LoRA on the dequantized base ${lossL}; worst adapter-gradient relative difference ${worst.toExponential(2)}`);
  expect(worst).toBeLessThan(1e-4);
  return { lossQ, codes };
}

describe('QLoRA', () => {
  it('weight-only INT4 GEMM accumulates onto C (C0 + X·Wᵀ, W dequantized by the codec)', async () => {
    const rt = await testRuntime();
    const [M, N, K, G] = [9, 20, 64, 32];
    const rng = new Rng(3);
    const x = rng.normalArray(M * K);
    const w = rng.normalArray(N * K, 0.05);
    const c0 = rng.normalArray(M * N);
    const q = quantizeRowGroupsRef(w, N, K, 'int4', G);
    const bufs = [rt.upload('activations', 'x', x), rt.upload('weights', 'wq', q.codes), rt.upload('weights', 'ws', q.scales), rt.upload('activations', 'c', c0)];
    const [xb, wq, ws, c] = bufs;
    rt.run([qgemmWeightOnly(rt, { label: 'qgemm.acc', x: xb, wq, ws, c, format: 'int4', G, M, N, K, accumulate: true, tiles: { BM: 32, BN: 64, TM: 4, TN: 4, BK: 8 } })]);
    const got = await rt.readF32(c, 0, M * N);
    const ref = qgemmWeightOnlyRef(x, q.codes, q.scales, 'int4', G, M, N, K);
    let err = 0;
    for (let i = 0; i < M * N; i++) err = Math.max(err, Math.abs(got[i] - (c0[i] + ref[i])));
    expect(err).toBeLessThan(1e-5);
    for (const b of bufs) rt.mem.free(b);
  });

  it('equals LoRA over the dequantized base (loss, adapter gradients) without fp32 block weights; the codes stay, the loss falls', async () => {
    const rt = await testRuntime();
    const spec = defaultLoraSpec(4, { alpha: 8 });
    const qspec = defaultQloraSpec('int4');
    const oq = options(spec, qspec);
    const layout = paramLayout(oq.model);
    const flat = initParams(oq.model, layout, 7);
    const base = unflatten(flat, layout);
    // The codec's reference: each block linear quantized in row groups and dequantized.
    const qp = resolveQloraPlan(oq.model, qspec);
    const deq = new Map(base);
    for (const l of qp.linears) {
      const r = quantizeRowGroupsRef(base.get(l.name)!, l.rows, l.cols, 'int4', l.G);
      deq.set(l.name, dequantizeRowGroupsRef(r.codes, r.scales, l.rows, l.cols, 'int4', l.G));
    }
    const ad = initLoraTensors(oq.model, spec, 11);
    const rng = new Rng(12);
    for (const a of loraAdapters(oq.model, spec)) ad.set(a.b, rng.uniformArray(a.out * spec.rank, -0.05, 0.05));
    const q = await Trainer.create(rt, oq, text, { tokenizer: tok, params: base, adapters: ad });
    const l = await Trainer.create(rt, options(spec), text, { tokenizer: tok, params: deq, adapters: ad });
    try {
      // Memory: no fp32 block weights on the GPU; the plan is what was allocated.
      expect(q.plan.memory.weights).toBeLessThan(l.plan.memory.weights);
      expect(q.memory()).toEqual(expect.objectContaining({ total: q.plan.memory.total }));
      const weightsBuf = q.model.b('weights').size;
      expect(weightsBuf).toBe(qp.dense.totalFloats * 4);
      expect(weightsBuf).toBeLessThan(layout.totalFloats * 4);

      // The GPU's quantized base is the codec's (codes and scales), and reads back as the dequantized reference.
      const name = qp.linears[3].name;
      const { lossQ, codes: codes0 } = await expectLoraOverDequantized(q, l, base, deq, qp.byName.get(name)!, 'int4');
      const batch = q.batchAt(0);

      // Training moves the adapters only: the codes stay bit for bit, the loss on a batch falls.
      for (let i = 0; i < 3; i++) await q.trainStep();
      expect(await q.computeGradients(batch)).toBeLessThan(lossQ);
      const codes1 = await codesOf(q, name);
      expect(Array.from(codes1.codes)).toEqual(Array.from(codes0.codes));
      expect(Array.from(codes1.scales)).toEqual(Array.from(codes0.scales));
    } finally {
      q.destroy();
      l.destroy();
    }
  });

  it('NF4 base: the upload is the NF4 codec\'s, and a step equals LoRA over the NF4-dequantized base (loss, adapter gradients)', async () => {
    const rt = await testRuntime();
    const spec = defaultLoraSpec(4, { alpha: 8 });
    const qspec = defaultQloraSpec('nf4');
    // One layer: the kernels are the INT4 case's (cached) but for the NF4 decode and quantize.
    const one = (o: TrainOptions): TrainOptions => ({ ...o, model: { ...o.model, num_hidden_layers: 1 } });
    const oq = one(options(spec, qspec));
    const layout = paramLayout(oq.model);
    const base = unflatten(initParams(oq.model, layout, 7), layout);
    const qp = resolveQloraPlan(oq.model, qspec);
    const deq = new Map(base);
    for (const l of qp.linears) {
      const r = quantizeRowGroupsRef(base.get(l.name)!, l.rows, l.cols, 'nf4', l.G);
      deq.set(l.name, dequantizeRowGroupsRef(r.codes, r.scales, l.rows, l.cols, 'nf4', l.G));
    }
    const ad = initLoraTensors(oq.model, spec, 11);
    const rng = new Rng(12);
    for (const a of loraAdapters(oq.model, spec)) ad.set(a.b, rng.uniformArray(a.out * spec.rank, -0.05, 0.05));
    const q = await Trainer.create(rt, oq, text, { tokenizer: tok, params: base, adapters: ad });
    const l = await Trainer.create(rt, one(options(spec)), text, { tokenizer: tok, params: deq, adapters: ad });
    try {
      await expectLoraOverDequantized(q, l, base, deq, qp.byName.get(qp.linears[5].name)!, 'nf4');
    } finally {
      q.destroy();
      l.destroy();
    }
  });

  it('f16 compute: equals LoRA-f16 over the dequantized base, with one linear\'s f16 scratch instead of an f16 copy of the base', async () => {
    const rt = await testRuntime();
    const spec = defaultLoraSpec(4, { alpha: 8 });
    const qspec = defaultQloraSpec('int4');
    const f16 = (o: TrainOptions): TrainOptions => ({ ...o, scheme: SCHEME_PRESETS.f16, model: { ...o.model, num_hidden_layers: 1 } });
    const oq = f16(options(spec, qspec));
    const ol = f16(options(spec));
    const layout = paramLayout(oq.model);
    const base = unflatten(initParams(oq.model, layout, 7), layout);
    const deq = new Map(base);
    for (const l of resolveQloraPlan(oq.model, qspec).linears) {
      const r = quantizeRowGroupsRef(base.get(l.name)!, l.rows, l.cols, 'int4', l.G);
      deq.set(l.name, dequantizeRowGroupsRef(r.codes, r.scales, l.rows, l.cols, 'int4', l.G));
    }
    const ad = initLoraTensors(oq.model, spec, 11);
    const rng = new Rng(12);
    for (const a of loraAdapters(oq.model, spec)) ad.set(a.b, rng.uniformArray(a.out * spec.rank, -0.05, 0.05));
    const o16 = { device: { shaderF16: true, tensorCores: false }, f16Twin: true, lossScale: { initScale: 2 ** 10 } };
    const pq = resolveTrainingPlan(oq, o16);
    const q = await Trainer.create(rt, oq, text, { tokenizer: tok, params: base, adapters: ad, plan: pq });
    const l = await Trainer.create(rt, ol, text, { tokenizer: tok, params: deq, adapters: ad, plan: resolveTrainingPlan(ol, o16) });
    try {
      expect(q.computePaths()[0]).toMatchObject({ forward: 'f16-simt', dx: 'f16-simt' });
      // No f16 copy of the base: the f16 weight is dequantized into qlora.w, one linear's scratch; the plan is what was allocated.
      const keys = pq.model.buffers.map((b) => b.key);
      expect(keys).not.toContain('f16.w');
      expect(pq.model.buffers.find((b) => b.key === 'qlora.w')!.bytes).toBe(pq.model.qlora!.maxFloats * 4);
      expect(q.memory()).toEqual(expect.objectContaining({ total: q.plan.memory.total }));

      const batch = q.batchAt(0);
      const lossQ = await q.computeGradients(batch);
      const lossL = await l.computeGradients(batch);
      const gq = unflatten(await q.model.readTrainable('grads'), q.model.trainable.layout);
      const gl = unflatten(await l.model.readTrainable('grads'), l.model.trainable.layout);
      let worst = 0;
      for (const [k, v] of gl) worst = Math.max(worst, maxRel(gq.get(k)!, v));
      console.log(`QLoRA int4 f16-twin micro: loss ${lossQ} vs LoRA-f16 on the dequantized base ${lossL}; worst adapter-gradient relative difference ${worst.toExponential(2)}`);
      expect(lossQ).toBe(lossL);
      expect(worst).toBe(0);
    } finally {
      q.destroy();
      l.destroy();
    }
  });

  it('refuses a group that leaves INT4 words split, QLoRA without LoRA, and INT8 compute, in words', () => {
    const o = options(defaultLoraSpec(2));
    expect(() => resolveQloraPlan(o.model, defaultQloraSpec('int4', 12))).toThrow(/group/);
    expect(() => resolvePlan(o.model, 2, 16, { qlora: defaultQloraSpec('int4') })).toThrow(/LoRA/);
    expect(() => resolvePlan(o.model, 2, 16, { lora: o.lora, qlora: defaultQloraSpec('int4'), scheme: SCHEME_PRESETS.int8 })).toThrow(/INT8/);
  });
});
