/**
 * The model's f16 branch on SwiftShader through its f32 twin (RunPlan.f16Twin: the casts round to f16
 * and store f32, the SIMT f16 GEMM's twin reads them): a micro run under the f16 preset, as if the
 * device had shader-f16, against the fp32 run from the same init and batches — forward, dX and dW of
 * every layer on the f16 path, loss scaling on, losses and norms within f16 rounding of fp32's; and
 * the step's standalone casts are only the counted ones (producers write the other f16 operands).
 */
import { describe, expect, it } from 'vitest';
import { castF16Operand } from '../../src/engine/kernels/matmul-f16/cast';
import { roundF16 } from '../../src/engine/quant/f16';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
const tok = CharTokenizer.fromText(text);

describe('the model f16 GEMMs (f32 twin)', () => {
  it('the cast twin stores each value as the f32 its f16 rounds to (Inf past 65504, NaN kept), odd n', async () => {
    const rt = await testRuntime();
    const x = new Float32Array([1 / 3, -2.71828, 65519, 65520, -1e6, NaN, 1e-3]);
    const xb = rt.upload('workspace', 'twin.x', x);
    const out = rt.createBuffer('workspace', 'twin.out', x.length * 4);
    try {
      rt.run([castF16Operand(rt, { label: 'twin', x: xb, out, n: x.length, elem: 'f32' })]);
      const got = await rt.readF32(out, 0, x.length);
      const want = Array.from(x, (v) => roundF16(v));
      want.forEach((w, i) => (Number.isNaN(w) ? expect(got[i]).toBeNaN() : expect(got[i], `x[${i}] = ${x[i]}`).toBe(w)));
    } finally {
      rt.mem.free(xb);
      rt.mem.free(out);
    }
  });

  it('runs every linear GEMM on the f16 path with loss scaling, within f16 rounding of fp32', async () => {
    const rt = await testRuntime();
    const base = defaultTrainOptions('micro', { steps: 10, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize, num_hidden_layers: 1 } });
    const opts = { ...base, scheme: SCHEME_PRESETS.f16 };
    const plan = resolveTrainingPlan(opts, { device: { shaderF16: true, tensorCores: false }, f16Twin: true, lossScale: { initScale: 2 ** 10 } });
    expect(plan.lossScaling).toBe(true);
    const ref = await Trainer.create(rt, base, text, { tokenizer: tok });
    const f16 = await Trainer.create(rt, opts, text, { tokenizer: tok, plan });
    try {
      const paths = f16.computePaths();
      expect(paths[0]).toMatchObject({ forward: 'f16-simt', dx: 'f16-simt', dw: 'f16-simt' });
      for (let s = 0; s < 3; s++) {
        const [r, m] = [await ref.trainStep(), await f16.trainStep()];
        expect(Math.abs(m.loss - r.loss) / r.loss, `step ${s} loss ${m.loss} vs ${r.loss}`).toBeLessThan(5e-3);
        expect(Math.abs(m.grad_norm - r.grad_norm) / r.grad_norm, `step ${s} norm ${m.grad_norm} vs ${r.grad_norm}`).toBeLessThan(5e-2);
        expect(m).toMatchObject({ loss_scale: 2 ** 10, skipped_steps: 0 });
      }
    } finally {
      ref.destroy();
      f16.destroy();
    }
  }, 600_000);

  it('casts on the step only what no producer writes in f16: the weights once, and per layer act\'s f16 cell', async () => {
    // Two layers: layer 1's norm1 backward hands its dres copy to layer 0's down_proj GEMMs. After the
    // run above, whose pipelines it reuses (the runtime caches them by code): a build costs little more.
    const rt = await testRuntime();
    const opts = { ...defaultTrainOptions('micro', { steps: 10, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize, num_hidden_layers: 2 } }), scheme: SCHEME_PRESETS.f16 };
    const plan = resolveTrainingPlan(opts, { device: { shaderF16: true, tensorCores: false }, f16Twin: true });
    const t = await Trainer.create(rt, opts, text, { tokenizer: tok, plan });
    try {
      const labels = t.stepDispatches().map((d) => d.label);
      const casts = labels.filter((l) => l.endsWith('[f32→f16]')).map((l) => l.replace('[f32→f16]', ''));
      expect(casts.filter((l) => l === 'f16.w'), 'every linear weight\'s copy in one dispatch').toEqual(['f16.w']);
      // The counted casts (model/linear-gemms.ts). The dW GEMMs read their X from the f16 saved cells
      // (plan.f16Cells: h1, o, h2, act), which the producers write; the attention writes o's (forward) and
      // dv's (backward) copies itself. The f16 preset stores gate, up and act f16: the SwiGLU writes gate's and
      // up's storage and act's cell, and its backward reads the storage and writes dgate's and dup's copies (plan.swigluHalf).
      expect(casts.filter((l) => l !== 'f16.w').sort()).toEqual([]);
      for (const k of ['rmsnormFwdH16', 'rmsnormBwdDxH', 'swigluFwdS', 'swigluBwdS', 'ropeBwdH16', 'attnFwdH']) expect(labels.some((l) => l.endsWith(k)), k).toBe(true);
      expect(labels.filter((l) => /\.attnBwdDkDv(Ds)?H$/.test(l)).length, 'each layer\'s dk/dv pass writes dv\'s copy').toBe(2);
    } finally {
      t.destroy();
    }
  });
});
