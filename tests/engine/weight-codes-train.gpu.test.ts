/**
 * The INT8 weights' codes made once per step (weight_codes 'per-step', model/weight-codes.ts)
 * against each GEMM quantizing its W (per-gemm), on micro: the same losses, weights and Adam
 * moments bit for bit over several AdamW steps, far fewer dispatches, and codes that follow the
 * weights after every update (stale ones would change the second step's loss).
 */
import { describe, expect, it } from 'vitest';
import { buildQuantize } from '../../src/engine/kernels/quantize/quantize';
import { PRESETS } from '../../src/engine/model/config';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { planMemory } from '../../src/engine/plan/train-plan';
import { writeAdamwStep } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
const [B, T] = [2, 32];
const STEPS = 3;
const params = initParams(cfg, paramLayout(cfg), 5);
const rng = new Rng(21);
const batches = Array.from({ length: STEPS }, () => Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size)));
const optimizer = defaultTrainOptions('micro', { steps: STEPS, warmup: 0, lr: 1e-2 }).optimizer;
const withCodes = (s: Scheme, weight_codes: 'per-gemm' | 'per-step') => parseScheme({ ...s, weight_codes });

/** STEPS training steps (forward, backward, AdamW) from `params`: each step's loss, the final weights and moments. */
async function train(scheme: Scheme, opts: { fuseGateUpDx?: boolean } = {}) {
  const rt = await testRuntime();
  const model = buildModel(rt, cfg, B, T, { scheme, ...opts });
  model.uploadParams(params);
  const losses: number[] = [];
  for (let s = 0; s < STEPS; s++) {
    model.setBatch(batches[s]);
    model.setStepSeed(s);
    writeAdamwStep(rt, model, s, optimizer);
    rt.run([...model.forward, ...model.backward, ...model.optimizer]);
    losses.push((await rt.readF32(model.b('loss'), 0, 1))[0]);
  }
  const out = {
    losses,
    weights: Array.from(await model.readFlat('weights')),
    m: Array.from(await model.readFlat('adam.m')),
    dispatches: model.forward.length + model.backward.length,
    keys: model.plan.buffers.map((b) => b.key),
    plan: model.plan,
  };
  model.destroy();
  return out;
}

describe('INT8 weight codes once per step', () => {
  const sr = parseScheme({ name: 'int8-sr', layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', grad_rounding: 'stochastic' } } });
  it.each([
    ['int8 (gate/up dX as one GEMM)', SCHEME_PRESETS.int8, {}],
    ['int8, gate/up dX apart', SCHEME_PRESETS.int8, { fuseGateUpDx: false }],
    ['agoq-int8 (INT8 gradient storage, INT4/BF16 activations)', SCHEME_PRESETS['agoq-int8'], {}],
    ['agoq-int8-shared (X codes shared with storage)', SCHEME_PRESETS['agoq-int8-shared'], {}],
    ['switchback (fp32 dW)', SCHEME_PRESETS.switchback, {}],
    ['int8 + stochastic dY rounding', sr, {}],
  ] as const)('%s: losses, weights and moments equal the per-GEMM quantizers\' bit for bit', async (_, scheme, opts) => {
    const perGemm = await train(withCodes(scheme, 'per-gemm'), opts);
    const perStep = await train(withCodes(scheme, 'per-step'), opts);
    expect(perGemm.plan.weightCodes).toBe('per-gemm');
    expect(perStep.plan.weightCodes).toBe('per-step');
    expect(perStep.losses).toEqual(perGemm.losses);
    expect(perStep.losses[0]).not.toBe(perStep.losses[STEPS - 1]); // the steps do train
    expect(perStep.weights).toEqual(perGemm.weights);
    expect(perStep.m).toEqual(perGemm.m);
    // Per GEMM: a quantizer of W before each of the 7 forward and the dX GEMMs of every layer; per step: three dispatches.
    expect(perGemm.dispatches - perStep.dispatches).toBeGreaterThanOrEqual(2 * 7 * cfg.num_hidden_layers - 3);
    expect(perGemm.keys).toContain('i8.w');
    expect(perStep.keys).not.toContain('i8.w');
    expect(perStep.keys).toEqual(expect.arrayContaining(['wcodes.rows', 'wcodes.rowScales', 'wcodes.cols', 'wcodes.colScales', 'wcodes.amax', 'wcodes.table']));
  }, 240_000);

  it('the codes follow the weights: after each AdamW update they are the new weights\' codes', async () => {
    const rt = await testRuntime();
    const scheme = withCodes(SCHEME_PRESETS.int8, 'per-step');
    const model = buildModel(rt, cfg, B, T, { scheme });
    model.uploadParams(params);
    const name = 'model.layers.1.mlp.down_proj.weight';
    const e = model.plan.wcodes!.rows.find((r) => r.name === name)!;
    const n = e.rows * e.rowLength;
    // W's codes as the forward GEMM quantized them per GEMM (buildQuantize int8 per row), from the current weights.
    const fresh = async () => {
      const k = buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: e.rowLength }, n }, model.param(name));
      rt.run(k.dispatches);
      const w = Array.from(await rt.readU32(k.words, 0, n / 4));
      k.destroy();
      return w;
    };
    const kept = async () => Array.from(await rt.readU32(model.b('wcodes.rows'), e.q, n / 4));
    const seen: number[][] = [];
    for (let s = 0; s < STEPS; s++) {
      model.setBatch(batches[s]);
      writeAdamwStep(rt, model, s, optimizer);
      rt.run(model.forward);
      const codes = await kept();
      expect(codes, `step ${s}: the codes the GEMMs read are the current weights'`).toEqual(await fresh());
      seen.push(codes);
      rt.run([...model.backward, ...model.optimizer]);
    }
    // The updates do move the codes (else this test could not tell stale codes from fresh ones).
    expect(seen[1]).not.toEqual(seen[0]);
    expect(seen[2]).not.toEqual(seen[1]);
    model.destroy();
  }, 120_000);

  it('plans the codes\' buffers: every INT8 forward weight per row, every INT8 dX weight per column, nothing per step without INT8', () => {
    const p = resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.int8 });
    const w = p.wcodes!;
    const linears = 7 * cfg.num_hidden_layers;
    expect(w.rows).toHaveLength(linears);
    // gate_proj and up_proj one [2F, C] matrix per layer (their dX is one GEMM).
    expect(w.cols.map((c) => c.name.replace(/^model\.layers\.\d+\./, ''))).toEqual([0, 1].flatMap(() => [
      'self_attn.q_proj.weight', 'self_attn.k_proj.weight', 'self_attn.v_proj.weight', 'self_attn.o_proj.weight', 'mlp.gate_up_proj', 'mlp.down_proj.weight']));
    for (const e of [...w.rows, ...w.cols]) expect([e.q % 256, e.s % 256]).toEqual([0, 0]);
    const bytes = (key: string) => p.buffers.find((b) => b.key === key)?.bytes;
    // Each tensor's codes and scales in its own range of the buffer, in order, none overlapping, the last one ending within it.
    const fits = (es: { q: number; s: number; codes: number; scales: number }[], codes: string, scales: string) => {
      es.forEach((e, i) => {
        const next = es[i + 1] ?? { q: bytes(codes)!, s: bytes(scales)! };
        expect(e.q + e.codes).toBeLessThanOrEqual(next.q);
        expect(e.s + e.scales).toBeLessThanOrEqual(next.s);
      });
    };
    fits(w.rows.map((e) => ({ ...e, codes: e.rows * e.rowLength, scales: e.rows * 4 })), 'wcodes.rows', 'wcodes.rowScales');
    fits(w.cols.map((e) => ({ ...e, codes: e.R * e.CN, scales: e.CN * 4 })), 'wcodes.cols', 'wcodes.colScales');
    expect(bytes('wcodes.rows')! - w.rows.reduce((n, e) => n + e.rows * e.rowLength, 0)).toBeLessThan(256 * w.rows.length);
    expect(p.buffers.filter((b) => b.key.startsWith('wcodes.')).map((b) => [b.key, b.category])).toEqual([
      ['wcodes.rows', 'weights'], ['wcodes.rowScales', 'weights'], ['wcodes.cols', 'weights'], ['wcodes.colScales', 'weights'],
      ['wcodes.amax', 'workspace'], ['wcodes.table', 'workspace']]);
    // Forward only: no dX, no column codes.
    const fwd = resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.int8, training: false });
    expect([fwd.wcodes!.rows.length, fwd.wcodes!.cols.length]).toEqual([linears, 0]);
    expect(fwd.buffers.map((b) => b.key)).not.toContain('wcodes.cols');
    // Per GEMM, or no INT8 forward/dX GEMM: nothing kept.
    expect(resolvePlan(cfg, B, T, { scheme: withCodes(SCHEME_PRESETS.int8, 'per-gemm') }).wcodes).toBeNull();
    const fp32 = resolvePlan(cfg, B, T, { scheme: withCodes(SCHEME_PRESETS.fp32, 'per-step') });
    expect([fp32.weightCodes, fp32.wcodes]).toEqual(['per-gemm', null]);
    expect(() => parseScheme({ name: 'x', weight_codes: 'per-layer' })).toThrow(/weight_codes/);
  });

  it('the AGoQ INT8 presets keep their codes per step only within 45 % of fp32\'s memory (base, batch 16, context 512, as --plan)', () => {
    const total = (scheme: Scheme) => planMemory(defaultTrainOptions('base', { batch: 16, seq: 512, scheme })).total;
    const fp32 = total(SCHEME_PRESETS.fp32);
    for (const name of ['agoq-int8', 'agoq-int8-shared']) {
      const preset = SCHEME_PRESETS[name];
      expect(total(preset) / fp32, name).toBeLessThanOrEqual(0.45);
      // per-step where it fits, per-gemm where it would not.
      expect(preset.weight_codes, name).toBe(total(withCodes(preset, 'per-step')) / fp32 <= 0.45 ? 'per-step' : 'per-gemm');
    }
    expect(SCHEME_PRESETS['agoq-int8'].weight_codes).toBe('per-step');
  });
});
