/**
 * gate_proj's and up_proj's INT8 dX as one GEMM over K = 2F (micro, dot4 on SwiftShader): the SwiGLU
 * backward writes the codes of [dgate | dup] itself (one scale per token over both halves), W's codes
 * are per input channel over [Wgate ; Wup], and the GEMM's output is the exact integer product of
 * those codes, scaled as the kernels round — with `up` stored fp32 (the plain SwiGLU backward) and
 * INT4 (the blocked one). Against the two-GEMM path (fuseGateUpDx: false, what stochastic rounding
 * runs), the step differs only by that coarser per-token scale: same loss, the gradients that come
 * before the last layer's MLP dX bit for bit, the rest close.
 */
import { describe, expect, it } from 'vitest';
import { i8TensorCoreSpec } from '../../src/engine/kernels/qgemm/tc';
import { quantizeTransposedI8Ref } from '../../src/engine/kernels/qgemm/block.ref';
import { qgemmI8ExactRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import { swigluBackwardCodesRef } from '../../src/engine/kernels/swiglu/swiglu.ref';
import { PRESETS } from '../../src/engine/model/config';
import { expectedComputePaths } from '../../src/engine/model/int8-gemms';
import type { LlamaGpu } from '../../src/engine/model/llama';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
// N = 256 tokens: an INT4-stored `up` runs the SwiGLU backward in two blocks of 128 rows.
const [B, T] = [8, 32];
const layout = paramLayout(cfg);
const params = initParams(cfg, layout, 3);
const rng = new Rng(11);
const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
const { N, C, F, L } = resolvePlan(cfg, B, T).dims;

const upInt4: Scheme = parseScheme({
  name: 'int8-up-int4',
  layer: { saved: { swiglu: { format: 'int4', granularity: 'group', group: 128, rounding: 'nearest' } }, compute: SCHEME_PRESETS.int8.layer.compute },
});
// W's codes per GEMM: the test reads the fused GEMM's operands from i8.w (per step they are the same codes, in wcodes.cols).
const int8PerGemm = parseScheme({ ...SCHEME_PRESETS.int8, weight_codes: 'per-gemm' });
const schemes: [string, Scheme][] = [['int8', int8PerGemm], ['int8, up stored INT4 (blocked SwiGLU backward)', upInt4]];

const i8 = (w: Uint32Array) => new Int8Array(w.buffer.slice(0));

async function model(scheme: Scheme, fuseGateUpDx = true): Promise<LlamaGpu> {
  const m = buildModel(await testRuntime(), cfg, B, T, { scheme, fuseGateUpDx });
  m.uploadParams(params);
  m.setBatch(tokens);
  m.setStepSeed(0);
  return m;
}

describe('gate/up dX as one INT8 GEMM over K = 2F', () => {
  it.each(schemes)('%s: the SwiGLU backward writes [dgate | dup]\'s codes, the GEMM multiplies them exactly', async (name, scheme) => {
    const rt = await testRuntime();
    const m = await model(scheme);
    expect(m.plan.gateUpDx).toEqual([true, true]);
    expect(m.plan.swigluRows, 'SwiGLU backward rows per block').toBe(scheme === upInt4 ? N / 2 : N);
    // The INT8 operands hold K = 2F (the memory plan sizes them).
    expect(m.plan.buffers.find((b) => b.key === 'i8.a')?.bytes).toBe(N * 2 * F);
    expect(m.plan.buffers.find((b) => b.key === 'i8.w')?.bytes).toBe(C * 2 * F);
    // Run up to the last layer's fused dX GEMM (the backward's first): dgate and dup are still in
    // gate's and up's buffers (or dF1), the GEMM's operands in i8.a / i8.w, its output in dh.
    const l = L - 1;
    const label = `L${l}.gate_up.dx`;
    const at = m.backward.findIndex((d) => d.label === label || d.label.startsWith(`${label}[`));
    expect(at, `${label} in the backward`).toBeGreaterThan(0);
    rt.run([...m.forward, ...m.backward.slice(0, at + 1)]);
    const dgate = await rt.readF32(m.b(scheme === upInt4 ? 'live.gate' : `L${l}.gate`), 0, N * F);
    const dup = await rt.readF32(m.b(scheme === upInt4 ? 'dF1' : `L${l}.up`), 0, N * F);
    const dy = swigluBackwardCodesRef(dgate, dup, N, F);
    const gotScales = await rt.readF32(m.b('i8.as'), 0, N);
    expect(Array.from(gotScales), `${name}: dY scales`).toEqual(Array.from(dy.scales));
    const gotCodes = await rt.readU32(m.b('i8.a'), 0, (N * 2 * F) / 4);
    expect(Array.from(gotCodes), `${name}: dY codes`).toEqual(Array.from(dy.words));
    // [Wgate ; Wup] [2F, C] per input channel over both: Wᵀ [C, 2F] per row.
    const g = layout.byName.get(`model.layers.${l}.mlp.gate_proj.weight`)!;
    const w = params.subarray(g.offset, g.offset + 2 * F * C);
    const wq = quantizeTransposedI8Ref(w, 2 * F, C, 2 * F);
    expect(Array.from(await rt.readF32(m.b('i8.ws'), 0, C)), `${name}: W scales`).toEqual(Array.from(wq.scales));
    expect(Array.from(await rt.readU32(m.b('i8.w'), 0, (C * 2 * F) / 4)), `${name}: W codes`).toEqual(Array.from(wq.words));
    const want = qgemmI8ExactRef(i8(dy.words), dy.scales, i8(wq.words), wq.scales, N, C, 2 * F);
    expect(Array.from(await rt.readF32(m.b('dh'), 0, N * C)), `${name}: dX`).toEqual(Array.from(want));
    m.destroy();
  }, 120_000);

  it.each(schemes)('%s: the step against the two-GEMM path', async (name, scheme) => {
    const rt = await testRuntime();
    const runs = [];
    for (const fuse of [true, false]) {
      const m = await model(scheme, fuse);
      rt.run([...m.forward, ...m.backward]);
      runs.push({ m, loss: (await rt.readF32(m.b('loss'), 0, 1))[0], grads: await m.readFlat('grads') });
    }
    const [fused, two] = runs;
    expect(two.m.plan.gateUpDx).toEqual([false, false]);
    expect(two.m.plan.buffers.find((b) => b.key === 'i8.a')?.bytes).toBe(N * Math.max(C, F));
    expect(fused.loss).toBe(two.loss);
    for (const v of layout.views) {
      const a = fused.grads.subarray(v.offset, v.offset + v.size);
      const b = two.grads.subarray(v.offset, v.offset + v.size);
      // Computed before the last layer's gate/up dX: the same bits.
      if (v.name.startsWith(`model.layers.${L - 1}.mlp.`) || v.name === 'model.norm.weight') {
        expect(Array.from(a), `${name}: ${v.name}`).toEqual(Array.from(b));
        continue;
      }
      let [ab, aa, bb] = [0, 0, 0];
      for (let i = 0; i < a.length; i++) [ab, aa, bb] = [ab + a[i] * b[i], aa + a[i] * a[i], bb + b[i] * b[i]];
      expect(ab / Math.sqrt(aa * bb), `${name}: ${v.name} gradient cosine, one GEMM vs two`).toBeGreaterThanOrEqual(0.999);
    }
    for (const { m } of runs) {
      // The run reports the dX path per layer, as the page predicts it.
      expect(m.computePaths().map((p) => p.dx)).toEqual(['int8-dot4', 'int8-dot4']);
      expect(m.computePaths()).toEqual(expectedComputePaths(m.plan, !!i8TensorCoreSpec(rt)));
      m.destroy();
    }
  }, 120_000);
});
