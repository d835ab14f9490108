/**
 * f16 storage of saved activations in the training step (micro), under the f16 preset (its f16 GEMMs
 * run fp32 on SwiftShader, no shader-f16): the forward is the fp32-saved run's (it reads the fp32
 * live copies), the stored words are the f16 rounding of those tensors bit for bit (SwiGLU's up
 * through the blocked backward's row unpack), gradients within f16 rounding of fp32 storage; a
 * Trainer under f16 and agoq-f16 allocates exactly its plan, and its losses track the fp32-saved run.
 */
import { describe, expect, it } from 'vitest';
import { packF16Ref } from '../../src/engine/kernels/f16/f16.ref';
import { PRESETS } from '../../src/engine/model/config';
import type { LlamaGpu } from '../../src/engine/model/llama';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { planMemory } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import type { Scheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';
import { F16_COMPUTE_FP32_SAVED } from '../helpers/schemes';

const cfg = { ...PRESETS.micro };
const [B, T] = [2, 32];
const layout = paramLayout(cfg);
const params = initParams(cfg, layout, 7);
const rng = new Rng(23);
const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
const F16 = SCHEME_PRESETS.f16;

const L = cfg.num_hidden_layers;
/** The tensors the f16 preset stores, per layer (l = L: the final norm's). */
const STORED = (l: number) => (l < L ? (['h1', 'q', 'k', 'v', 'o', 'h2', 'gate', 'up', 'act'] as const) : (['hF'] as const));

/** One forward + backward; `fwd` reads buffers between them (the backward overwrites some in place). */
async function step(scheme: Scheme, fwd?: (model: LlamaGpu) => Promise<void>): Promise<{ loss: number; grads: Float32Array; model: LlamaGpu }> {
  const rt = await testRuntime();
  const model = buildModel(rt, cfg, B, T, { scheme });
  model.uploadParams(params);
  model.setBatch(tokens);
  rt.run(model.forward);
  await fwd?.(model);
  rt.run(model.backward);
  return { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads: await model.readFlat('grads'), model };
}

describe('f16 saved activations in the training step (micro)', () => {
  it('stores the f16 preset\'s tensors as their f16 rounding; the residual stream stays fp32; gradients within f16 rounding of fp32 storage', async () => {
    const rt = await testRuntime();
    const fp32 = new Map<string, Uint32Array>();
    const ref = await step(F16_COMPUTE_FP32_SAVED, async (m) => {
      for (let l = 0; l <= L; l++) for (const key of STORED(l)) fp32.set(`L${l}.${key}`, await rt.readU32(m.b(`L${l}.${key}`)));
    });
    const got = await step(F16);
    try {
      // Storage changes only what backward reads: the forward, and so the loss, is the fp32-saved run's bit for bit.
      expect(got.loss).toBe(ref.loss);
      // up goes through the blocked SwiGLU backward (a row block unpacked at a time).
      expect(got.model.plan.swigluRows).toBeLessThan(B * T);
      for (let l = 0; l <= L; l++) {
        for (const key of STORED(l)) {
          const st = got.model.storage[l][key];
          expect(st?.format, `L${l}.${key}`).toBe('f16');
          const fp = fp32.get(`L${l}.${key}`)!.subarray(0, st!.n);
          const words = await rt.readU32(got.model.b(`L${l}.${key}.codes`), 0, st!.words);
          const want = packF16Ref(fp);
          expect(words.every((w, i) => w === want[i]), `L${l}.${key}: stored words are the f16 of the fp32 tensor`).toBe(true);
        }
        for (const key of l < L ? (['xIn', 'xMid'] as const) : (['xFinal'] as const)) expect(got.model.storage[l][key], `L${l}.${key} (norm_input) stays fp32`).toBeUndefined();
      }
      for (const v of layout.views) {
        const a = got.grads.subarray(v.offset, v.offset + v.size);
        const b = ref.grads.subarray(v.offset, v.offset + v.size);
        let err = 0;
        let norm = 0;
        for (let i = 0; i < a.length; i++) {
          err += (a[i] - b[i]) ** 2;
          norm += b[i] ** 2;
        }
        const rel = Math.sqrt(err / norm);
        // f16's relative rounding error is at most 2^-11; through the backward a few times that.
        expect(rel, `${v.name}: relative gradient error vs fp32 storage`).toBeLessThan(2 ** -8);
        // Every linear weight's dW reads a stored f16 input.
        if (/(proj|lm_head)\.weight$/.test(v.name)) expect(rel, `${v.name}: changed by the f16 storage`).toBeGreaterThan(2 ** -24);
      }
    } finally {
      ref.model.destroy();
      got.model.destroy();
    }
  }, 120_000);

  it('a Trainer under f16 and agoq-f16 allocates exactly its plan; f16\'s losses stay within f16 rounding of the fp32-saved run', async () => {
    const rt = await testRuntime();
    const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
    const tok = CharTokenizer.fromText(text);
    const opts = (scheme: Scheme) => defaultTrainOptions('micro', { steps: 3, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize }, scheme });
    const ref = await Trainer.create(rt, opts(F16_COMPUTE_FP32_SAVED), text, { tokenizer: tok });
    const f16 = await Trainer.create(rt, opts(F16), text, { tokenizer: tok });
    const agoq = await Trainer.create(rt, opts(SCHEME_PRESETS['agoq-f16']), text, { tokenizer: tok });
    try {
      for (const t of [f16, agoq]) expect(t.memory(), t.opts.scheme!.name).toEqual(planMemory(t.opts));
      expect(f16.memory().activations).toBeLessThan(ref.memory().activations);
      for (let s = 0; s < 3; s++) {
        const [r, m] = [await ref.trainStep(), await f16.trainStep()];
        expect(Math.abs(m.loss - r.loss) / r.loss, `step ${s} loss ${m.loss} vs ${r.loss}`).toBeLessThan(2 ** -10);
        if (s > 0) expect(m.loss, `step ${s}: the f16-stored backward changed the update`).not.toBe(r.loss);
      }
      expect(Number.isFinite((await agoq.trainStep()).loss)).toBe(true);
    } finally {
      ref.destroy();
      f16.destroy();
      agoq.destroy();
    }
  }, 120_000);
});
