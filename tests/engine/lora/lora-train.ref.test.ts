import { describe, expect, it } from 'vitest';
import { RefLoraTrainer } from '../../../src/engine/lora/lora-train.ref';
import { initLoraTensors, loraAdapters, type LoraSpec } from '../../../src/engine/lora/spec';
import { validateModelConfig } from '../../../src/engine/model/config';
import { initParams, paramLayout, unflatten } from '../../../src/engine/model/params';
import { Rng } from '../../../src/engine/util/rng';

const cfg = validateModelConfig({
  vocab_size: 11, hidden_size: 16, intermediate_size: 24, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  max_position_embeddings: 8, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: false, initializer_range: 0.2,
});
const spec: LoraSpec = { rank: 2, alpha: 3, dropout: 0, targets: ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] };
const B = 2, T = 5;

function setup(zeroB = false) {
  const base = unflatten(initParams(cfg, paramLayout(cfg), 1), paramLayout(cfg));
  const ad = initLoraTensors(cfg, spec, 2);
  const rng = new Rng(3);
  if (!zeroB) for (const a of loraAdapters(cfg, spec)) ad.set(a.b, rng.normalArray(a.out * spec.rank, 0.3));
  const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
  return { base, ad, tokens };
}

describe('RefLoraTrainer', () => {
  it('adapter gradients match finite differences of the loss (every target, A and B)', () => {
    const { base, ad, tokens } = setup();
    const tr = new RefLoraTrainer(cfg, spec, base, ad);
    tr.lossAndGrad(tokens, B, T);
    const rng = new Rng(4);
    for (const a of loraAdapters(cfg, spec)) {
      for (const name of [a.a, a.b]) {
        const p = tr.tensors.get(name)!;
        for (let probe = 0; probe < 2; probe++) {
          const i = rng.int(p.length);
          const v = p[i], h = 1e-5;
          p[i] = v + h;
          const up = tr.lossAndGrad(tokens, B, T, false);
          p[i] = v - h;
          const down = tr.lossAndGrad(tokens, B, T, false);
          p[i] = v;
          const fd = (up - down) / (2 * h);
          const got = tr.grads.get(name)![i];
          expect(Math.abs(got - fd), `${name}[${i}]: ${got} vs ${fd}`).toBeLessThan(1e-7 + 1e-5 * Math.abs(fd));
        }
      }
    }
  });

  it("PEFT's init (B = 0) starts at the base model's loss, with no gradient into A", () => {
    const { base, ad, tokens } = setup(true);
    const tr = new RefLoraTrainer(cfg, spec, base, ad);
    const plain = new RefLoraTrainer(cfg, { ...spec, targets: ['q'] }, base, initLoraTensors(cfg, { ...spec, targets: ['q'] }, 9));
    expect(tr.lossAndGrad(tokens, B, T)).toBe(plain.lossAndGrad(tokens, B, T, false));
    for (const a of loraAdapters(cfg, spec)) {
      expect(tr.grads.get(a.a)!.every((g) => g === 0)).toBe(true);
      expect(tr.grads.get(a.b)!.some((g) => g !== 0)).toBe(true);
    }
  });

  it('trains: AdamW on the adapters only lowers the loss of a repeated batch; the base is untouched', () => {
    const { base, ad, tokens } = setup();
    const before = new Map([...base].map(([n, w]) => [n, Float32Array.from(w)]));
    const tr = new RefLoraTrainer(cfg, spec, base, ad);
    const opt = { lr: 1e-2, min_lr: 1e-2, warmup_steps: 0, total_steps: 10, beta1: 0.9, beta2: 0.99, eps: 1e-8, weight_decay: 0.1, grad_clip: 1 };
    const losses = Array.from({ length: 10 }, () => tr.trainStep(tokens, B, T, opt).loss);
    expect(losses[9]).toBeLessThan(losses[0] - 0.05);
    expect(tr.step).toBe(10);
    for (const [n, w] of base) expect(w, n).toEqual(before.get(n));
  });

  it('refuses dropout and mismatched tensors', () => {
    const { base, ad } = setup();
    expect(() => new RefLoraTrainer(cfg, { ...spec, dropout: 0.1 }, base, ad)).toThrow(/dropout must be 0/);
    ad.delete('model.layers.1.mlp.up_proj.lora_B.weight');
    expect(() => new RefLoraTrainer(cfg, spec, base, ad)).toThrow(/adapter model\.layers\.1\.mlp\.up_proj\.lora_B\.weight is missing/);
  });
});
