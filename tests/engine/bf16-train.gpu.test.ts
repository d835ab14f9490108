/**
 * bf16 storage of the attention activations (Q/K/V and the attention output) in the training step
 * (micro): the forward is the fp32 one (it reads the fp32 live copies), the stored words are the
 * bf16 rounding of those tensors bit for bit, and the backward, which reads them back, gives
 * gradients close to fp32's (bf16 keeps 8 significant bits) but not equal.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { packBf16Ref } from '../../src/engine/kernels/bf16/bf16.ref';
import type { LlamaGpu } from '../../src/engine/model/llama';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { QuantErrorProbe } from '../../src/engine/train/probe';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
const [B, T] = [2, 32];
const layout = paramLayout(cfg);
const params = initParams(cfg, layout, 5);
const rng = new Rng(21);
const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
const bf16 = { format: 'bf16' } as const;
const ATTN_BF16 = parseScheme({ name: 'attn-bf16', layer: { saved: { attn_qkv: bf16, attn_out: bf16 } } });

async function step(scheme: Scheme): Promise<{ loss: number; grads: Float32Array; model: LlamaGpu }> {
  const rt = await testRuntime();
  const model = buildModel(rt, cfg, B, T, { scheme });
  model.uploadParams(params);
  model.setBatch(tokens);
  rt.run([...model.forward, ...model.backward]);
  return { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads: await model.readFlat('grads'), model };
}

describe('bf16 attention activations in the training step (micro)', () => {
  it('stores the attention tensors as their bf16 rounding; gradients close to fp32 storage, not equal', async () => {
    const rt = await testRuntime();
    const ref = await step(SCHEME_PRESETS.fp32);
    const got = await step(ATTN_BF16);
    // Storage changes only what backward reads: the forward, and so the loss, is fp32's bit for bit.
    expect(got.loss).toBe(ref.loss);
    for (let l = 0; l < cfg.num_hidden_layers; l++) {
      for (const key of ['q', 'k', 'v', 'o'] as const) {
        const st = got.model.storage[l][key];
        expect(st?.format, `L${l}.${key}`).toBe('bf16');
        const fp = await rt.readU32(ref.model.b(`L${l}.${key}`), 0, st!.n);
        const words = await rt.readU32(got.model.b(`L${l}.${key}.codes`), 0, st!.words);
        expect(Array.from(words).every((w, i) => w === packBf16Ref(fp)[i]), `L${l}.${key}: stored words are the bf16 of fp32's tensor`).toBe(true);
      }
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
      // bf16's relative rounding error is at most 2^-9; through the attention backward a few times that.
      expect(rel, `${v.name}: relative gradient error vs fp32 storage`).toBeLessThan(2 ** -6);
      // The attention weights' gradients read the bf16 tensors directly (about 2^-9 off here).
      if (/self_attn\.(q|k|v|o)_proj/.test(v.name)) expect(rel, `${v.name}: changed by the bf16 storage`).toBeGreaterThan(2 ** -20);
    }
    // The quantization-error probe has no bf16 sites (and does not trip over the storage).
    expect(() => QuantErrorProbe.create(rt, got.model)).not.toThrow();
    ref.model.destroy();
    got.model.destroy();
  }, 120_000);
});
