/**
 * INT8 compute in the training step (micro): the `int8` scheme's first forward equals the fake-quant
 * simulation with the same quantizers (W per output channel, X per token: the study's w8 + a8
 * cells) up to fp32 accumulation order, and its gradients stay close to fp32's, tensor by tensor.
 * The dot4 path is what SwiftShader runs (no tensor cores).
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { i8TensorCoreSpec } from '../../src/engine/kernels/qgemm/tc';
import { headCodesLayout } from '../../src/engine/kernels/attention/head-codes';
import { expectedComputePaths } from '../../src/engine/model/int8-gemms';
import type { LlamaGpu } from '../../src/engine/model/llama';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { planMemory } from '../../src/engine/plan/train-plan';
import { Trainer } from '../../src/engine/train/trainer';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { quantizeRef } from '../../src/engine/kernels/quantize/quantize.ref';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
const [B, T] = [2, 32];
const layout = paramLayout(cfg);
const params = initParams(cfg, layout, 3);
const rng = new Rng(9);
const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));

/** Loss and flat gradients of one forward + backward at `params` under `scheme`. */
async function lossAndGrads(scheme: Scheme): Promise<{ loss: number; grads: Float32Array | null; model: LlamaGpu }> {
  const rt = await testRuntime();
  const model = buildModel(rt, cfg, B, T, { scheme });
  model.uploadParams(params);
  model.setBatch(tokens);
  model.setStepSeed(0);
  rt.run([...model.forward, ...model.backward]);
  const loss = (await rt.readF32(model.b('loss'), 0, 1))[0];
  // Quantized gradient storage (AGoQ) keeps no flat fp32 gradient buffer.
  const grads = model.plan.grads ? null : await model.readFlat('grads');
  return { loss, grads, model };
}

function cosine(a: Float32Array, b: Float32Array): number {
  let ab = 0;
  let aa = 0;
  let bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / Math.sqrt(aa * bb);
}

const q8row = { format: 'int8', granularity: 'row', group: 128, rounding: 'nearest' } as const;

describe('INT8 GEMMs in the training step (micro, dot4 on SwiftShader)', () => {
  it('the int8 forward equals the fake-quant simulation (w8 per channel + a8 per token); gradients vs fp32 cosine ≥ 0.99 per tensor', async () => {
    const fp32 = await lossAndGrads(SCHEME_PRESETS.fp32);
    const sim = await lossAndGrads(parseScheme({ name: 'w8a8-sim', layer: { weights: q8row, gemm_inputs: q8row } }));
    const runs: [string, Scheme][] = [
      ['int8 (dW over all tokens)', SCHEME_PRESETS.int8],
      ['int8-blockdw', SCHEME_PRESETS['int8-blockdw']],
      ['switchback', SCHEME_PRESETS.switchback],
      ['int8 + SR, dW over all tokens', parseScheme({ name: 'int8-sr-all', layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', grad_rounding: 'stochastic' } } })],
      ['int8 + SR, dw blocks of 64', parseScheme({ name: 'int8-sr', layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 64, grad_rounding: 'stochastic' } } })],
    ];
    for (const [name, scheme] of runs) {
      const r = await lossAndGrads(scheme);
      expect(Math.abs(r.loss - sim.loss) / sim.loss, `${name}: loss ${r.loss} vs the fake-quant simulation's ${sim.loss}`).toBeLessThan(2e-6);
      expect(r.loss, `${name}: quantization changes the loss a little`).not.toBe(fp32.loss);
      for (const v of layout.views) {
        const c = cosine(r.grads!.subarray(v.offset, v.offset + v.size), fp32.grads!.subarray(v.offset, v.offset + v.size));
        expect(c, `${name}: ${v.name} gradient cosine vs fp32`).toBeGreaterThanOrEqual(0.99);
      }
      const paths = r.model.computePaths();
      expect(paths[0].forward).toBe('int8-dot4');
      expect(paths[0].dx).toBe('int8-dot4');
      expect(paths[0].dw).toBe(name === 'switchback' ? 'fp32' : 'int8-dot4');
      // The paths the page shows before a run are the ones the model records.
      expect(paths, `${name}: predicted GEMM paths`).toEqual(expectedComputePaths(r.model.plan, !!i8TensorCoreSpec(await testRuntime())));
      r.model.destroy();
    }
    expect(fp32.model.computePaths()[1]).toEqual({ layer: 1, forward: 'fp32', dx: 'fp32', dw: 'fp32', attention: 'fp32', attentionDp: 'fp32' });
    fp32.model.destroy();
    sim.model.destroy();
  }, 240_000);

  it('agoq-int8 trains with INT4 activation storage, INT8 gradient storage and INT8 GEMMs', async () => {
    const r = await lossAndGrads(SCHEME_PRESETS['agoq-int8']);
    expect(Number.isFinite(r.loss)).toBe(true);
    expect(r.model.computePaths()[0]).toEqual({ layer: 0, forward: 'int8-dot4', dx: 'int8-dot4', dw: 'int8-dot4', attention: 'fp32', attentionDp: 'fp32' });
    r.model.destroy();
  }, 120_000);

  it('int8-qk: INT8 attention scores move the loss a little from int8\'s, keep gradients within cosine 0.99 of fp32\'s, and report their path', async () => {
    const fp32 = await lossAndGrads(SCHEME_PRESETS.fp32);
    const int8 = await lossAndGrads(SCHEME_PRESETS.int8);
    const qk = await lossAndGrads(SCHEME_PRESETS['int8-qk']);
    expect(qk.loss).not.toBe(int8.loss);
    expect(Math.abs(qk.loss - int8.loss) / int8.loss).toBeLessThan(1e-2);
    for (const v of layout.views) {
      const c = cosine(qk.grads!.subarray(v.offset, v.offset + v.size), fp32.grads!.subarray(v.offset, v.offset + v.size));
      expect(c, `int8-qk: ${v.name} gradient cosine vs fp32`).toBeGreaterThanOrEqual(0.99);
    }
    const paths = qk.model.computePaths();
    expect(paths.map((p) => p.attention)).toEqual(['int8-dot4', 'int8-dot4']);
    expect(paths).toEqual(expectedComputePaths(qk.model.plan, !!i8TensorCoreSpec(await testRuntime())));
    // Q's and K's codes per (token, head) and a scale per row, in head-codes buffers; no dO/V codes.
    const keys = qk.model.plan.buffers.map((b) => b.key);
    expect(keys.filter((k) => /^i8\.[qkov][cs]$/.test(k)).sort()).toEqual(['i8.kc', 'i8.qc']);
    expect(paths.map((p) => p.attentionDp)).toEqual(['fp32', 'fp32']);
    for (const r of [fp32, int8, qk]) r.model.destroy();
    // The forward's RoPE wrote the last layer's Q and K codes: quantizeRef's per (token, head) row of the saved q and k.
    const rt = await testRuntime();
    const fwd = buildModel(rt, cfg, B, T, { scheme: SCHEME_PRESETS['int8-qk'] });
    fwd.uploadParams(params);
    fwd.setBatch(tokens);
    rt.run(fwd.forward);
    const D = cfg.hidden_size / cfg.num_attention_heads;
    for (const [saved, codes] of [['q', 'i8.qc'], ['k', 'i8.kc']] as const) {
      const x = await rt.readF32(fwd.saved(1, saved));
      const want = quantizeRef(x, 'int8', { kind: 'row', rowLength: D });
      expect(await rt.readU32(fwd.b(codes), 0, want.words.length), `${saved} codes`).toEqual(want.words);
      const at = headCodesLayout(want.scales.length, D).scaleOffset;
      expect(await rt.readF32(fwd.b(codes), at, want.scales.length), `${saved} scales`).toEqual(want.scales);
    }
    expect(fwd.forward.some((d) => d.label.endsWith('.ropeQ8'))).toBe(true);
    fwd.destroy();
    const agoq = await lossAndGrads(SCHEME_PRESETS['agoq-int8-qk']);
    expect(Number.isFinite(agoq.loss)).toBe(true);
    expect(agoq.model.computePaths()[1].attention).toBe('int8-dot4');
    agoq.model.destroy();
  }, 240_000);

  it('int8-attn: INT8 dP as well keeps the loss (forward unchanged) and gradients within cosine 0.99 of fp32\'s, moves them from int8-qk\'s, and reports its path', async () => {
    const fp32 = await lossAndGrads(SCHEME_PRESETS.fp32);
    const qk = await lossAndGrads(SCHEME_PRESETS['int8-qk']);
    const attn = await lossAndGrads(SCHEME_PRESETS['int8-attn']);
    // dP is the backward's: the forward, hence the loss, is int8-qk's bit for bit.
    expect(attn.loss).toBe(qk.loss);
    let moved = 0;
    for (const v of layout.views) {
      const g = attn.grads!.subarray(v.offset, v.offset + v.size);
      const c = cosine(g, fp32.grads!.subarray(v.offset, v.offset + v.size));
      expect(c, `int8-attn: ${v.name} gradient cosine vs fp32`).toBeGreaterThanOrEqual(0.99);
      if (/self_attn\.(q|k)_proj/.test(v.name)) moved = Math.max(moved, ...g.map((x, i) => Math.abs(x - qk.grads![v.offset + i])));
    }
    expect(moved, 'q/k projection gradients differ from int8-qk\'s').toBeGreaterThan(0);
    const paths = attn.model.computePaths();
    expect(paths.map((p) => p.attentionDp)).toEqual(['int8-dot4', 'int8-dot4']);
    expect(paths).toEqual(expectedComputePaths(attn.model.plan, !!i8TensorCoreSpec(await testRuntime())));
    expect(attn.model.plan.buffers.map((b) => b.key).filter((k) => /^i8\.[qkov]c$/.test(k)).sort()).toEqual(['i8.kc', 'i8.oc', 'i8.qc', 'i8.vc']);
    for (const r of [fp32, qk, attn]) r.model.destroy();
  }, 240_000);
});

describe('one set of codes for a saved tensor stored INT8 per row and the forward INT8 GEMM that reads it', () => {
  const shareable = (compute: object) => parseScheme({
    name: 'int8-row-saved',
    layer: { saved: { norm_input: { ...q8row, format: 'int4', granularity: 'group' }, qkv_input: q8row, attn_out: q8row, mlp_input: q8row, down_input: q8row }, compute },
  });
  const quantizes = (ds: { label: string }[]) => ds.filter((d) => d.label.startsWith('quantize.')).length;
  const INT8 = SCHEME_PRESETS.int8.layer.compute;

  // The second: agoq-int8-shared (INT4 elsewhere, up stored too: SwiGLU in place) with fp32 gradients, to compare them.
  const agoqShared = parseScheme({ ...SCHEME_PRESETS['agoq-int8-shared'], grads: { storage: { format: 'fp32' }, wire: { format: 'fp32' } } });
  it.each([['int8 + INT8-row GEMM inputs', shareable(INT8)], ['agoq-int8-shared', agoqShared]] as const)('%s: the step equals quantizing storage and GEMM input separately, bit for bit, with fewer quantize dispatches', async (_, scheme) => {
    const rt = await testRuntime();
    const run = async (shareCodes: boolean) => {
      const model = buildModel(rt, cfg, B, T, { scheme, shareCodes });
      model.uploadParams(params);
      model.setBatch(tokens);
      rt.run([...model.forward, ...model.backward]);
      const out = {
        loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
        grads: Array.from(await model.readFlat('grads')),
        codes: Array.from(await rt.readU32(model.b('L1.h2.codes'), 0, model.storage[1].h2!.words)),
        quantizes: quantizes(model.forward),
        forward: model.forward.length,
        plan: model.plan,
      };
      model.destroy();
      return out;
    };
    const [shared, separate] = [await run(true), await run(false)];
    const want = scheme === agoqShared ? ['act', 'h1', 'h2'] : ['act', 'h1', 'h2', 'o'];
    expect(shared.plan.sharedCodes.map((s) => [...s].sort())).toEqual([want, want]);
    expect(separate.plan.sharedCodes.every((s) => s.size === 0)).toBe(true);
    expect(shared.loss).toBe(separate.loss);
    expect(shared.grads).toEqual(separate.grads);
    expect(shared.codes).toEqual(separate.codes);
    // Per layer: h1's, h2's and act's storage passes and o_proj's quantize into i8.a are gone; nothing else changes.
    expect(separate.quantizes - shared.quantizes).toBeGreaterThanOrEqual(want.length * cfg.num_hidden_layers);
    expect(separate.forward - shared.forward).toBe(separate.quantizes - shared.quantizes);
  }, 120_000);

  it('needs no i8.a when only forward GEMMs are INT8 and every X is a saved tensor\'s codes; otherwise plans as before', () => {
    const keys = (scheme: Scheme, shareCodes: boolean) => resolvePlan(cfg, B, T, { scheme, shareCodes }).buffers.map((b) => b.key);
    const fwdOnly = shareable({ forward: 'int8' });
    expect(keys(fwdOnly, true)).not.toContain('i8.a');
    expect(keys(fwdOnly, false)).toContain('i8.a');
    // dX's dY still needs i8.a; so does a forward X stored otherwise (o at its default fp32).
    expect(keys(shareable(INT8), true)).toEqual(keys(shareable(INT8), false));
    const oFp32 = parseScheme({ ...fwdOnly, layer: { ...fwdOnly.layer, saved: { ...fwdOnly.layer.saved, attn_out: { ...q8row, format: 'fp32' } } } });
    expect(keys(oFp32, true)).toContain('i8.a');
    // Group granularity, stochastic rounding or an fp32 forward: separate codes.
    for (const saved of [{ ...q8row, granularity: 'group' }, { ...q8row, rounding: 'stochastic' }] as const) {
      const s = parseScheme({ name: 'x', layer: { saved: { qkv_input: saved }, compute: INT8 } });
      expect(resolvePlan(cfg, B, T, { scheme: s }).sharedCodes[0].has('h1')).toBe(false);
    }
    expect(resolvePlan(cfg, B, T, { scheme: shareable({}) }).sharedCodes[0].size).toBe(0);
    // Evaluation saves nothing, so shares nothing.
    expect(resolvePlan(cfg, B, T, { scheme: shareable(INT8), training: false }).sharedCodes[0].size).toBe(0);
  });

  it('a forward-only INT8 model with shared codes trains the same step as without', async () => {
    const rt = await testRuntime();
    const grads = async (shareCodes: boolean) => {
      const model = buildModel(rt, cfg, B, T, { scheme: shareable({ forward: 'int8' }), shareCodes });
      model.uploadParams(params);
      model.setBatch(tokens);
      rt.run([...model.forward, ...model.backward]);
      const g = Array.from(await model.readFlat('grads'));
      model.destroy();
      return g;
    };
    expect(await grads(true)).toEqual(await grads(false));
  }, 120_000);
});

describe('a Trainer with INT8 compute', () => {
  it('allocates exactly its plan (the INT8 operand buffers included) and reports the GEMM paths', async () => {
    const rt = await testRuntime();
    const text = 'abcdefghij klmnopqrstuvwxyz\n'.repeat(200);
    const tok = CharTokenizer.fromText(text);
    for (const name of ['agoq-int8', 'agoq-int8-shared']) {
      const opts = defaultTrainOptions('micro', { steps: 2, warmup: 1, batch: 2, model: { vocab_size: tok.vocabSize }, scheme: SCHEME_PRESETS[name] });
      const trainer = await Trainer.create(rt, opts, text, { tokenizer: tok });
      for (let s = 0; s < 2; s++) expect(Number.isFinite((await trainer.trainStep()).loss)).toBe(true);
      expect(trainer.memory(), name).toEqual(planMemory(trainer.opts));
      expect(trainer.computePaths().map((p) => p.dw)).toEqual(['int8-dot4', 'int8-dot4']);
      trainer.destroy();
    }
  }, 120_000);
});

describe('compute formats are validated when the plan is resolved', () => {
  const plan = (layer: object, B2 = B, T2 = T) => () => resolvePlan(cfg, B2, T2, { scheme: parseScheme({ name: 'x', layer }) });
  it.each([
    ['a fake-quantized weight cell', { weights: q8row, compute: { forward: 'int8' } }, /set the weights cell to fp32/],
    ['fake-quantized GEMM inputs', { gemm_inputs: q8row, compute: { forward: 'int8' } }, /set gemm_inputs to fp32/],
    ['fake-quantized dW output gradients', { gemm_output_grads: q8row, compute: { dw: 'int8' } }, /set gemm_output_grads to fp32/],
    ['stochastic rounding without an INT8 gradient GEMM', { compute: { forward: 'int8', grad_rounding: 'stochastic' } }, /has none/],
  ])('%s', (_, layer, err) => {
    // The forward-only stochastic case: SR rounds only dY; an INT8 forward alone has none.
    expect(plan(layer)).toThrow(err);
  });
  it('a dW block that does not divide the tokens', () => {
    expect(plan({ compute: { dw: 'int8', dw_block: 64 } }, 1, 32)).toThrow(/dw_block 64 must divide the tokens per step \(batch·context = 32\)/);
  });
  it('a dW over all tokens whose token count does not pack into words', () => {
    expect(plan({ compute: { dw: 'int8', dw_block: 'all' } }, 1, 30)).toThrow(/dw_block 'all' packs the tokens per step four to a word, and batch·context = 30/);
    expect(plan({ compute: { dw: 'int8', dw_block: 'all' } }, 1, 32)).not.toThrow();
  });
  it('tensor parallelism', () => {
    expect(() => resolvePlan(cfg, B, T, { scheme: parseScheme({ name: 'x', layer: { compute: { forward: 'int8' } }, tp: { degree: 2 } }) })).toThrow(/tensor parallelism/);
  });
  it('an unknown compute format is a schema error', () => {
    expect(() => parseScheme({ name: 'x', layer: { compute: { forward: 'int4' } } })).toThrow(/compute\.forward/);
  });
});
