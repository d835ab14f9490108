/**
 * What a LoRA step costs beside the adapters' arithmetic (one file: its models share pipelines, whose
 * compiles dominate GPU tests on SwiftShader).
 *
 * Stacked GEMMs: adapters sharing an input (q/k/v, gate/up) run their A-side GEMMs as one (lora/gemms.ts):
 * one x̃·Aᵀ, one dA and one dX term per group. Against the same model with every adapter's GEMMs apart
 * (LoraPlan.stack false): the loss, every adapter gradient and the input gradient (through every dX
 * term) within float rounding, in fewer dispatches. Both add y's s·u·Bᵀ and dX's s·v·A in the
 * fp32 base GEMMs' epilogue (matmul.ts lowRank): no GEMM of their own; under f16 compute they are
 * fp32 GEMMs of their own unless LoraPlan.f16Epilogue (the f16 epilogue sums per output element). A training step saves uᵀ from the
 * forward (the backward's recompute gone, bit for bit the same step) and splits the thin uᵀ/vᵀ GEMMs
 * over K where the heuristic says (within rounding of one-pass GEMMs and terms of their own).
 *
 * A frozen base's derived copies (the f16 weight copies, the INT8 per-step weight codes) are made once
 * per upload (LlamaGpu.baseDerive), not at the start of every forward: over 3 training steps no cast or
 * weight-code dispatch is encoded, and the losses equal bit for bit those of the same model remaking
 * its copies before every step (what the forward did before).
 */
import { describe, expect, it, vi } from 'vitest';
import type { Dispatch } from '../../../src/engine/gpu/runtime';
import { loraGroups } from '../../../src/engine/lora/gemms';
import { loraBatchesReduce, loraBuffers, loraGradSplitBytes, type LoraPlan } from '../../../src/engine/lora/plan';
import { defaultLoraSpec, initLoraTensors, loraAdapters, type LoraSpec } from '../../../src/engine/lora/spec';
import { type ModelConfig, PRESETS } from '../../../src/engine/model/config';
import { LlamaGpu } from '../../../src/engine/model/llama';
import { flatten, initParams, paramLayout } from '../../../src/engine/model/params';
import { resolvePlan, type ResolveOptions } from '../../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { writeAdamwStep } from '../../../src/engine/train/trainer';
import { Rng } from '../../../src/engine/util/rng';
import { testRuntime } from '../../helpers/gpu';
import { maxRel } from '../../helpers/compare';

const cfg = { ...PRESETS.micro, num_hidden_layers: 1 };
/** SmolLM2-135M's shape (issue 39's target model). */
const SMOLLM2_135M: ModelConfig = {
  ...PRESETS.micro, vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: 30, num_attention_heads: 9, num_key_value_heads: 3, max_position_embeddings: 2048, tie_word_embeddings: true,
};
const [B, T, STEPS] = [2, 16, 3];
const spec = defaultLoraSpec(4, { alpha: 8 });
const params = initParams(cfg, paramLayout(cfg), 5);
const rng = new Rng(21);
const batches = Array.from({ length: STEPS }, () => Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size)));
const optimizer = defaultTrainOptions('micro', { steps: STEPS, warmup: 0, lr: 1e-2 }).optimizer;
/** The adapters of `sp` with random B (PEFT's zero B would leave dA zero). */
const adaptersOf = (sp: LoraSpec) => {
  const t = initLoraTensors(cfg, sp, 3);
  const r = new Rng(4);
  for (const a of loraAdapters(cfg, sp)) t.set(a.b, r.uniformArray(a.out * sp.rank, -0.05, 0.05));
  return t;
};
const adapters = adaptersOf(spec);

/** STEPS LoRA steps (`everyStep`: baseDerive before each): the losses and the labels of every dispatch encoded while they ran. */
async function train(opts: Omit<ResolveOptions, 'lora'>, everyStep = false) {
  const rt = await testRuntime();
  const model = new LlamaGpu(rt, resolvePlan(cfg, B, T, { ...opts, lora: spec }));
  const encode = vi.spyOn(rt, 'encode');
  try {
    model.uploadParams(params);
    model.writeTrainable('weights', flatten(adapters, model.trainable.layout));
    encode.mockClear();
    const losses: number[] = [];
    for (let s = 0; s < STEPS; s++) {
      model.setBatch(batches[s]);
      model.setStepSeed(s);
      writeAdamwStep(rt, model, s, optimizer);
      rt.run([...(everyStep ? model.baseDerive : []), ...model.forward, ...model.backward, ...model.optimizer]);
      losses.push((await rt.readF32(model.b('loss'), 0, 1))[0]);
    }
    const labels = encode.mock.calls.flatMap((c) => (c[1] as Dispatch[]).map((d) => d.label));
    return { losses, labels, derive: model.baseDerive.map((d) => d.label) };
  } finally {
    encode.mockRestore();
    model.destroy();
  }
}


/**
 * Forward and backward of one batch: the loss, the adapters' gradients, dX at the first layer's
 * input, the dispatches. `o`: LoraPlan's switches (lora.u and lora.ws are allocated to the default
 * plan's sizes, the largest).
 */
async function gradients(
  stack: boolean, o: Pick<LoraPlan, 'saveU' | 'splitThin' | 'epilogue' | 'f16Epilogue' | 'batchReduce'> = {}, opts: Omit<ResolveOptions, 'lora'> = {},
  x: { spec?: LoraSpec; batch?: number } = {},
) {
  const rt = await testRuntime();
  const b = x.batch ?? B;
  const p = resolvePlan(cfg, b, T, { ...opts, lora: x.spec ?? spec });
  const lora = { ...p.lora!, stack, ...o };
  // Batched reduces where the default plan (a small model) does not batch: its lora.gws added.
  const gws = loraBuffers(lora, p.dims, true).find((x) => x.key === 'lora.gws');
  const model = new LlamaGpu(rt, { ...p, lora, buffers: gws && !p.buffers.some((x) => x.key === 'lora.gws') ? [...p.buffers, gws] : p.buffers });
  try {
    model.uploadParams(params);
    model.writeTrainable('weights', flatten(x.spec && x.spec.rank !== spec.rank ? adaptersOf(x.spec) : adapters, model.trainable.layout));
    const r = new Rng(22);
    model.setBatch(b === B ? batches[0] : Int32Array.from({ length: b * (T + 1) }, () => r.int(cfg.vocab_size)));
    model.setStepSeed(0);
    const steps: Dispatch[] = [...model.forward, ...model.backward];
    rt.run(steps);
    const N = b * T;
    return {
      loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
      grads: await model.readTrainable('grads'),
      dres: await rt.readF32(model.b('dres'), 0, N * cfg.hidden_size),
      dispatches: steps.length + model.optimizer.length,
      labels: steps.map((d) => d.label),
      groups: model.lora!.groups.map((g) => g.adapters.map((a) => a.target).join('')),
    };
  } finally {
    model.destroy();
  }
}

describe('stacked LoRA GEMMs', () => {
  it('equal every adapter\'s own GEMMs: loss, adapter gradients and dX within float rounding, at least 6 fewer dispatches a layer; up-projections and dX terms in the base GEMMs', async () => {
    const one = await gradients(true);
    const apart = await gradients(false);
    console.log(`LoRA micro (1 layer, all targets, r4): ${one.dispatches} dispatches a step stacked, ${apart.dispatches} apart`);
    expect(one.groups).toEqual(['qkv', 'o', 'gateup', 'down']);
    expect(apart.groups).toEqual(['q', 'k', 'v', 'o', 'gate', 'up', 'down']);
    expect(Math.abs(one.loss - apart.loss) / apart.loss).toBeLessThan(1e-6);
    expect(maxRel(one.grads, apart.grads)).toBeLessThan(1e-5);
    expect(maxRel(one.dres, apart.dres)).toBeLessThan(1e-5);
    // Per layer: x̃·Aᵀ in the forward and dA (each one or two dispatches): 3 adapters in 1, 2 in 1.
    expect(apart.dispatches - one.dispatches).toBeGreaterThanOrEqual(2 * 3 * cfg.num_hidden_layers);
    for (const r of [one, apart]) {
      // The up-projections and dX terms ride in the base GEMMs: 7 forward, one dX GEMM per group.
      expect(r.labels.filter((x) => /\.lora_B\[|\.lora_A\.dx/.test(x))).toEqual([]);
      expect(r.labels.filter((x) => /_proj\[matmul .* \+lr4\]$/.test(x))).toHaveLength(7 * cfg.num_hidden_layers);
      expect(r.labels.filter((x) => /\.dx\[matmul .* \+lr\d+\]$/.test(x))).toHaveLength(r.groups.length * cfg.num_hidden_layers);
    }
  }, 240_000);

  it('uᵀ saved from the forward: the backward runs no x̃·Aᵀ GEMM, bit for bit the recomputing step; split uᵀ/vᵀ and the epilogue equal one-pass GEMMs of their own within float rounding', async () => {
    const saved = await gradients(true);
    const again = await gradients(true, { saveU: false });
    const plain = await gradients(true, { splitThin: false, epilogue: false });
    // The forward's x̃·Aᵀ GEMMs are labelled `<linear>_proj.lora_A`; the backward's recompute `<linear>.dw.lora_A`.
    const recomputes = (r: typeof saved) => r.labels.filter((x) => /\.dw\.lora_A\[matmul (?!split)/.test(x));
    expect(recomputes(saved)).toEqual([]);
    expect(recomputes(again)).toHaveLength(4 * cfg.num_hidden_layers);
    expect(saved.loss).toBe(again.loss);
    expect(saved.grads).toEqual(again.grads);
    expect(saved.dres).toEqual(again.dres);
    // The one-pass step: no split of uᵀ or vᵀ, their terms as GEMMs of their own.
    expect(plain.labels.filter((x) => /lora_A\[matmul .*_sk|lora_B\.dx\[matmul .*_sk/.test(x))).toEqual([]);
    expect(plain.labels.filter((x) => /\.lora_B\[|\.lora_A\.dx\[/.test(x))).toHaveLength(11 * cfg.num_hidden_layers);
    expect(saved.labels.filter((x) => /_proj\.lora_A\[matmul .*_sk/.test(x)).length).toBeGreaterThan(0);
    expect(Math.abs(plain.loss - saved.loss) / saved.loss).toBeLessThan(1e-6);
    expect(maxRel(plain.grads, saved.grads)).toBeLessThan(1e-5);
    expect(maxRel(plain.dres, saved.dres)).toBeLessThan(1e-5);
  }, 240_000);

  it('f16 compute (the f32 twin): the adapters\' terms are fp32 GEMMs of their own unless LoraPlan.f16Epilogue puts them in the f16 GEMMs\' epilogue; the two agree within float rounding', async () => {
    const f16: Omit<ResolveOptions, 'lora'> = { scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true };
    const own = await gradients(true, {}, f16);
    const fused = await gradients(true, { f16Epilogue: ['forward', 'dx'] }, f16);
    const fwd = await gradients(true, { f16Epilogue: ['forward'] }, f16);
    const lr = (r: typeof own) => r.labels.filter((x) => /\[f16 .* \+lr\d+\]$/.test(x));
    const apart = (r: typeof own) => r.labels.filter((x) => /\.lora_B\[matmul |\.lora_A\.dx\[matmul /.test(x));
    expect(lr(own)).toEqual([]);
    expect(apart(own)).toHaveLength(11 * cfg.num_hidden_layers);
    // Fused: 7 forward GEMMs and one dX GEMM per group carry the term; no GEMM of its own.
    expect(lr(fused)).toHaveLength((7 + fused.groups.length) * cfg.num_hidden_layers);
    expect(apart(fused)).toEqual([]);
    expect(own.dispatches - fused.dispatches).toBe(11 * cfg.num_hidden_layers);
    // The forward's only: its 7 GEMMs carry it, the groups' dX terms are GEMMs of their own.
    expect(lr(fwd).filter((x) => /_proj\[/.test(x))).toHaveLength(7 * cfg.num_hidden_layers);
    expect(apart(fwd).filter((x) => /\.lora_A\.dx\[/.test(x))).toHaveLength(fwd.groups.length * cfg.num_hidden_layers);
    expect(lr(fwd)).toHaveLength(7 * cfg.num_hidden_layers);
    for (const r of [fused, fwd]) {
      expect(Math.abs(own.loss - r.loss) / r.loss).toBeLessThan(1e-6);
      expect(maxRel(own.grads, r.grads)).toBeLessThan(1e-5);
      expect(maxRel(own.dres, r.dres)).toBeLessThan(1e-5);
    }
  }, 240_000);

  it('f16 cells (the f32 twin): the adapters\' GEMMs over x (uᵀ, dA) read its f16 cell, no unpack of h1, h2, act; within f16 rounding of the step that stores them packed and unpacks them', async () => {
    const f16: Omit<ResolveOptions, 'lora'> = { scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true };
    const cells = await gradients(true, {}, f16);
    const packed = await gradients(true, {}, { ...f16, shareF16: false });
    // Not bit for bit: with cells the forward's uᵀ is over f16 x too (PEFT's autocast), the packed step's over fp32 x.
    const TOL = { loss: 1e-5, grads: 5e-3 };
    const near = (a: typeof cells, b: typeof cells) => {
      expect(Math.abs(a.loss - b.loss) / b.loss).toBeLessThan(TOL.loss);
      expect(maxRel(a.grads, b.grads)).toBeLessThan(TOL.grads);
      expect(maxRel(a.dres, b.dres)).toBeLessThan(TOL.grads);
    };
    near(cells, packed);
    expect(cells.grads.some((g) => g !== 0)).toBe(true);
    // Per layer: o's unpack stays (the attention backward reads o in fp32); the twin's unpack of a cell is a copy.
    const unpacks = (r: typeof cells) => r.labels.filter((x) => /^L0\.(h1|o|h2|act)\.f16\.(unpack|f16cell)/.test(x)).sort();
    expect(unpacks(cells)).toEqual(['L0.o.f16.f16cell.copy']);
    expect(unpacks(packed)).toEqual(['L0.act.f16.unpack', 'L0.h1.f16.unpack', 'L0.h2.f16.unpack', 'L0.o.f16.unpack']);
    // uᵀ recomputed in the backward (saveU false) reads the cell too.
    const again = await gradients(true, { saveU: false }, f16);
    const againPacked = await gradients(true, { saveU: false }, { ...f16, shareF16: false });
    expect(again.labels.filter((x) => /\.dw\.lora_A\[matmul (?!split)/.test(x))).toHaveLength(4 * cfg.num_hidden_layers);
    expect(unpacks(again)).toEqual(['L0.o.f16.f16cell.copy']);
    near(again, againPacked);
    // The same uᵀ saved or recomputed from the cell: bit for bit.
    expect(again.loss).toBe(cells.loss);
    expect(again.grads).toEqual(cells.grads);
    // With dropout (each adapter masks fp32 x) the cells are unpacked for them as before.
    const spec1 = { ...spec, dropout: 0.1 };
    const rt = await testRuntime();
    const model = new LlamaGpu(rt, resolvePlan(cfg, B, T, { ...f16, lora: spec1 }));
    try {
      expect(model.backward.map((d) => d.label).filter((x) => /^L0\.(h1|o|h2|act)\.f16\.f16cell/.test(x)).sort())
        .toEqual(['L0.act.f16.f16cell.copy', 'L0.h1.f16.f16cell.copy', 'L0.h2.f16.f16cell.copy', 'L0.o.f16.f16cell.copy']);
    } finally {
      model.destroy();
    }
  }, 240_000);

  it('split-K reduces batched: a layer\'s dA/dB partials summed by one reduce, a stacked group\'s vᵀ by one; bit for bit each GEMM reducing its own (fp32, the f16 twin, dropout)', async () => {
    // B8: K = B·T = 256 for dA/dB, long enough that the heuristic splits them.
    const f16: Omit<ResolveOptions, 'lora'> = { scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true };
    const cases: [string, Omit<ResolveOptions, 'lora'>, LoraSpec, number?, number?, number?][] = [
      // name, options, spec, the backward's reduces a layer batched, then each GEMM its own. At this shape the
      // heuristic splits every dA and dB, and vᵀ where K = out is F (gate, up), not C or KVC.
      ['fp32', {}, spec, 1 + 1, 11 + 2],
      ['f16 twin', f16, spec, 1 + 1, 11 + 2],
      // Dropout: nothing stacked (7 dA, 7 dB, 7 vᵀ): one reduce for the layer's 14 gradients still, gate's and up's vᵀ their own.
      ['dropout', {}, { ...spec, dropout: 0.1 }, 1 + 2, 14 + 2],
      // r16 at B4: the dW scratch (N·C floats) has room for fewer slices than lora.gws; the GEMMs split as with it.
      ['r16 B4', {}, defaultLoraSpec(16), undefined, undefined, 4],
    ];
    for (const [name, opts, sp, nBatched, nEach, batch = 8] of cases) {
      const batched = await gradients(true, { batchReduce: true }, opts, { spec: sp, batch });
      const each = await gradients(true, { batchReduce: false }, opts, { spec: sp, batch });
      expect(batched.loss, name).toBe(each.loss);
      expect(batched.grads, name).toEqual(each.grads);
      expect(batched.dres, name).toEqual(each.dres);
      expect(batched.grads.some((g) => g !== 0), name).toBe(true);
      const reduces = (r: typeof batched) => r.labels.filter((l) => /lora_.*split-K reduce/.test(l) && !/_proj\.lora_A/.test(l));
      // The GEMMs are the same choices; only the reduces moved.
      expect(batched.labels.filter((l) => !/split-K reduce/.test(l)), name).toEqual(each.labels.filter((l) => !/split-K reduce/.test(l)));
      if (nBatched === undefined || nEach === undefined) continue;
      expect(reduces(batched), name).toHaveLength(nBatched * cfg.num_hidden_layers);
      expect(reduces(each), name).toHaveLength(nEach * cfg.num_hidden_layers);
      expect(reduces(batched).filter((l) => /^L0\.lora_grads\[matmul split-K reduce ×\d+\]$/.test(l)), name).toHaveLength(1);
    }
    // Its own plan's buffers: no lora.gws where nothing batches (the model builds without it).
    const p = resolvePlan(cfg, 8, T, { lora: spec });
    const lora = { ...p.lora!, batchReduce: false };
    const buffers = [...p.buffers.filter((x) => !x.key.startsWith('lora.')), ...loraBuffers(lora, p.dims, true)];
    expect(buffers.map((x) => x.key)).not.toContain('lora.gws');
    expect(loraBuffers({ ...p.lora!, batchReduce: true }, p.dims, true).map((x) => x.key)).toContain('lora.gws');
    const rt = await testRuntime();
    new LlamaGpu(rt, { ...p, lora, buffers }).destroy();
  }, 480_000);

  it('batches the reduces by default only where lora.gws costs no more than the adapters\' training state', () => {
    // One micro layer: a layer's span times MAX_SPLIT_K slices outweighs its adapters' weights, grads, m and v.
    const small = resolvePlan(cfg, 8, T, { lora: spec });
    expect(loraBatchesReduce(small.lora!, small.dims)).toBe(false);
    expect(small.buffers.map((x) => x.key)).not.toContain('lora.gws');
    // SmolLM2-135M's 30 layers at B8×T512, r16 on every linear: 18.75 MiB of partials against 78 MB of adapter state.
    const smol = resolvePlan(SMOLLM2_135M, 8, 512, { lora: defaultLoraSpec(16) });
    expect(loraBatchesReduce(smol.lora!, smol.dims)).toBe(true);
    expect(smol.buffers.find((x) => x.key === 'lora.gws')?.bytes).toBe(loraGradSplitBytes(smol.lora!, smol.dims));
    expect(loraGradSplitBytes(smol.lora!, smol.dims)).toBeLessThanOrEqual(4 * smol.lora!.layout.totalFloats * 4);
  }, 480_000);

  it('stack nothing where they cannot: dropout (each adapter its own mask)', () => {
    const p = resolvePlan(cfg, B, T, { lora: { ...spec, dropout: 0.1 } });
    expect(loraGroups(p.lora!, p.dims).every((g) => g.adapters.length === 1)).toBe(true);
    const q = resolvePlan(cfg, B, T, { lora: spec });
    expect(loraGroups(q.lora!, q.dims).map((g) => g.adapters.length)).toEqual([3, 1, 2, 1]);
  });
});

/** Made once, the copies give the same steps as remade before each; the steps encode none of them. */
async function check(opts: Omit<ResolveOptions, 'lora'>, prefix: string, count: number) {
  const once = await train(opts);
  const each = await train(opts, true);
  expect(once.derive.filter((x) => x.startsWith(prefix))).toHaveLength(count);
  expect(once.labels.filter((x) => x.startsWith(prefix))).toEqual([]);
  expect(each.labels.filter((x) => x.startsWith(prefix))).toHaveLength(STEPS * count);
  expect(once.losses).toEqual(each.losses);
  expect(once.losses[0]).not.toBe(once.losses[STEPS - 1]); // the adapters do train
}

describe('a frozen base (LoRA) derives its copies once per upload', () => {
  it('f16 (twin): the weights\' f16 copies', async () => {
    await check({ scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true }, 'f16.w[', 1);
  }, 240_000);

  it('INT8 per-step weight codes', async () => {
    const scheme: Scheme = parseScheme({ ...SCHEME_PRESETS.int8, weight_codes: 'per-step' });
    // One dispatch for the rows, two for the columns (model/weight-codes.ts).
    await check({ scheme }, 'wcodes', 3);
  }, 240_000);
});
