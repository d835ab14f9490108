/**
 * LoRA in the engine against two independent routes: the adapted model equals the base with merged
 * weights W' = W + s·B·A (forward loss; mergeLora is checked against a naive loop in merge.test.ts),
 * and the adapters' gradients equal what the full model's
 * gradient of W' implies (dB = s·G·Aᵀ, dA = s·Bᵀ·G, G = ∂L/∂W'), which the fp32 path computes and is
 * itself checked against a float64 reference (train.gpu.test.ts). Then: the base stays frozen bit
 * for bit, no base gradient or optimizer buffer exists, dropout's mask agrees between forward and
 * backward (finite differences), and generation sees the adapters.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../../src/engine/io/checkpoint';
import { initParams, paramLayout, unflatten } from '../../../src/engine/model/params';
import { defaultTrainOptions, type TrainOptions } from '../../../src/engine/train/options';
import { CharTokenizer } from '../../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../../src/engine/train/trainer';
import { mergeLora } from '../../../src/engine/lora/merge';
import { defaultLoraSpec, initLoraTensors, loraAdapters, loraScale, type LoraSpec } from '../../../src/engine/lora/spec';
import { Rng } from '../../../src/engine/util/rng';
import { testRuntime } from '../../helpers/gpu';
import { maxRel } from '../../helpers/compare';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 50_000);
const tok = CharTokenizer.fromText(text);

function options(lora?: LoraSpec): TrainOptions {
  const o = defaultTrainOptions('micro', { steps: 8, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize } });
  return lora ? { ...o, lora } : o;
}

/** Adapters with B nonzero too (PEFT's init has B = 0, which would hide half of the backward). */
function adapters(o: TrainOptions, spec: LoraSpec, seed: number): Map<string, Float32Array> {
  const t = initLoraTensors(o.model, spec, seed);
  const rng = new Rng(seed + 1);
  for (const a of loraAdapters(o.model, spec)) t.set(a.b, rng.uniformArray(a.out * spec.rank, -0.05, 0.05));
  return t;
}


describe('LoRA adapters on the GPU', () => {
  it('equal the merged model forward and its gradients backward; the base stays frozen and owns no gradient or moments', async () => {
    const rt = await testRuntime();
    const spec = defaultLoraSpec(4, { alpha: 8 });
    const o = options(spec);
    const base = unflatten(initParams(o.model, paramLayout(o.model), 7), paramLayout(o.model));
    const ad = adapters(o, spec, 11);
    const lora = await Trainer.create(rt, o, text, { tokenizer: tok, params: base, adapters: ad });
    const full = await Trainer.create(rt, options(), text, { tokenizer: tok, params: mergeLora(o.model, spec, base, ad) });
    try {
      const keys = [...lora.model.buf.keys()];
      expect(keys).not.toContain('grads');
      expect(keys).not.toContain('adam.m');
      expect(lora.plan.memory.optimizer).toBeLessThan(full.plan.memory.optimizer / 4);
      expect(lora.memory()).toEqual(expect.objectContaining({ total: lora.plan.memory.total }));

      const batch = lora.batchAt(0);
      const lossL = await lora.computeGradients(batch);
      const lossF = await full.computeGradients(batch);
      expect(Math.abs(lossL - lossF) / lossF, `loss ${lossL} vs merged ${lossF}`).toBeLessThan(2e-6);

      const gl = unflatten(await lora.model.readTrainable('grads'), lora.model.trainable.layout);
      const gf = unflatten(await full.model.readFlat('grads'), full.model.layout);
      const s = loraScale(spec);
      const r = spec.rank;
      let worst = 0;
      for (const a of loraAdapters(o.model, spec)) {
        const G = gf.get(a.base)!;
        const A = ad.get(a.a)!;
        const B = ad.get(a.b)!;
        const dB = new Float64Array(a.out * r);
        const dA = new Float64Array(r * a.in);
        for (let i = 0; i < a.out; i++) {
          for (let j = 0; j < a.in; j++) {
            const g = s * G[i * a.in + j];
            for (let k = 0; k < r; k++) {
              dB[i * r + k] += g * A[k * a.in + j];
              dA[k * a.in + j] += g * B[i * r + k];
            }
          }
        }
        worst = Math.max(worst, maxRel(gl.get(a.b)!, dB), maxRel(gl.get(a.a)!, dA));
      }
      console.log(`LoRA r4 micro: loss ${lossL} vs merged ${lossF}; worst adapter-gradient relative error ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(1e-4);

      // Training moves only the adapters: the base is bit-identical after steps, the loss falls.
      const before = await lora.parameters();
      const losses: number[] = [];
      let files;
      for (let i = 0; i < 8; i++) {
        if (i === 4) files = await lora.checkpoint();
        losses.push((await lora.trainStep()).loss);
      }
      const [first, last] = [losses[0], losses[7]];
      const after = await lora.parameters();
      for (const [k, v] of before) expect(Buffer.from(after.get(k)!.buffer).equals(Buffer.from(v.buffer)), k).toBe(true);
      const trained = await lora.adapters();
      expect(maxRel(trained.get(loraAdapters(o.model, spec)[0].b)!, ad.get(loraAdapters(o.model, spec)[0].b)!)).toBeGreaterThan(1e-3);
      expect(last).toBeLessThan(first);

      // A checkpoint (the frozen base, the adapters as PEFT writes them, their moments) resumes bit for bit.
      const ck = loadCheckpoint(files as unknown as Record<string, Uint8Array>);
      expect(ck.adapters?.spec).toEqual(spec);
      const resumed = await Trainer.create(rt, o, text, { tokenizer: tok, params: ck.params, adapters: ck.adapters!.tensors, optimizer: ck.extra!.optimizer });
      try {
        for (let i = 4; i < 8; i++) expect((await resumed.trainStep()).loss, `step ${i}`).toBe(losses[i]);
      } finally {
        resumed.destroy();
      }

      // Generation goes through the adapters: greedy samples of the adapted model equal the merged model's.
      const fullNow = await Trainer.create(rt, options(), text, { tokenizer: tok, params: mergeLora(o.model, spec, base, trained) });
      try {
        expect(await lora.sample('ROMEO:', 12, 0)).toBe(await fullNow.sample('ROMEO:', 12, 0));
      } finally {
        fullNow.destroy();
      }
    } finally {
      lora.destroy();
      full.destroy();
    }
  });

  it('dropout: the backward sees the forward\'s mask (finite differences), and evaluation runs without it', async () => {
    const rt = await testRuntime();
    const spec = defaultLoraSpec(2, { alpha: 4, dropout: 0.3, targets: ['q', 'v', 'down'] });
    const o = options(spec);
    const ad = adapters(o, spec, 5);
    const t = await Trainer.create(rt, o, text, { tokenizer: tok, adapters: ad });
    try {
      const batch = t.batchAt(0);
      await t.computeGradients(batch);
      const layout = t.model.trainable.layout;
      const grads = await t.model.readTrainable('grads');
      const w0 = await t.model.readTrainable('weights');
      // Loss at θ ± ε·e_i through the same step's mask (the same step seed: computeGradients reuses stepCount).
      const lossAt = async (w: Float32Array) => {
        t.model.writeTrainable('weights', w);
        return t.computeGradients(batch);
      };
      const rng = new Rng(3);
      let checked = 0;
      for (const v of layout.views) {
        for (let n = 0; n < 2; n++) {
          const i = v.offset + rng.int(v.size);
          if (Math.abs(grads[i]) < 1e-3) continue;
          const eps = 1e-2;
          const wp = w0.slice();
          wp[i] += eps;
          const wm = w0.slice();
          wm[i] -= eps;
          const fd = ((await lossAt(wp)) - (await lossAt(wm))) / (2 * eps);
          expect(Math.abs(fd - grads[i]) / Math.abs(grads[i]), `${v.name}[${i - v.offset}]: fd ${fd} grad ${grads[i]}`).toBeLessThan(0.05);
          checked++;
        }
      }
      expect(checked).toBeGreaterThan(3);
      t.model.writeTrainable('weights', w0);
      // Dropout changes the training loss from step seed to step seed, never the evaluation's.
      const [e1, e2] = [await t.evaluate(), await t.evaluate()];
      expect(e1).toBe(e2);
    } finally {
      t.destroy();
    }
  });
});
