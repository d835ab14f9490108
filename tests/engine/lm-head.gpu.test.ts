/**
 * The LM head over chunks of tokens (model/lm-head.ts, RunPlan.logitsRows): forced to 2–3 chunks on
 * micro shapes, one training step's forward + backward against the same model with the logits whole.
 * Every row's logits, loss and dlogits are computed as unchunked, so the loss, the per-row losses, the
 * head's dX and every gradient downstream of it are the same bits; only the head's own dW (tied: the
 * embedding's) sums its tokens chunk by chunk (accumulated GEMMs), so it agrees to float rounding.
 * Evaluation's loss-only list gives the same loss. Two cases (each file compiles its pipelines anew
 * on SwiftShader): full training, tied, loss-scaled, with hF stored INT4 (the head's dW dequantizes
 * hF's rows per chunk); LoRA under f16 compute (the f32 twin).
 */
import { describe, expect, it } from 'vitest';
import { defaultLoraSpec, initLoraTensors, loraAdapters } from '../../src/engine/lora/spec';
import { PRESETS, type ModelConfig } from '../../src/engine/model/config';
import { LlamaGpu } from '../../src/engine/model/llama';
import { flatten, initParams, paramLayout } from '../../src/engine/model/params';
import { type ResolveOptions, resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { maxRel } from '../helpers/compare';
import { attentionTestRuntime } from '../helpers/gpu';

const micro = { ...PRESETS.micro, num_hidden_layers: 1 };

interface Case {
  cfg: ModelConfig;
  B: number;
  T: number;
  opts: ResolveOptions;
}

/** One step's loss, per-row losses, the trainable gradients, dres (the gradient at the first layer's input) and the eval loss. */
async function step(c: Case, rows?: number) {
  const rt = await attentionTestRuntime();
  const plan = resolvePlan(c.cfg, c.B, c.T, { ...c.opts, ...(rows ? { logitsChunkRows: rows } : {}) });
  const model = new LlamaGpu(rt, plan);
  try {
    const layout = paramLayout(c.cfg);
    model.uploadParams(initParams(c.cfg, layout, 7));
    if (plan.lora) {
      // Nonzero B: the adapters pass a gradient to A and to the base's dX.
      const t = initLoraTensors(c.cfg, plan.lora.spec, 3);
      const r = new Rng(4);
      for (const a of loraAdapters(c.cfg, plan.lora.spec)) t.set(a.b, r.uniformArray(a.out * plan.lora.spec.rank, -0.05, 0.05));
      model.writeTrainable('weights', flatten(t, model.trainable.layout));
    }
    const rng = new Rng(11);
    model.setBatch(Int32Array.from({ length: c.B * (c.T + 1) }, () => rng.int(c.cfg.vocab_size)));
    model.setStepSeed(0);
    rt.run([...model.forward, ...model.backward]);
    const N = c.B * c.T;
    const out = {
      plan,
      loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
      losses: await rt.readF32(model.b('losses'), 0, N),
      grads: await model.readTrainable('grads'),
      dres: await rt.readF32(model.b('dres'), 0, N * c.cfg.hidden_size),
      chunkedLogits: rows ? (() => { try { void model.forwardLogits; return false; } catch { return true; } })() : false,
      evalLoss: 0,
    };
    rt.run(model.lossForward);
    out.evalLoss = (await rt.readF32(model.b('loss'), 0, 1))[0];
    return out;
  } finally {
    model.destroy();
  }
}

/**
 * Chunked (`rows` per chunk) against whole: the loss bit for bit; dX and every gradient to 1e-5 (the head's dX
 * GEMM may split over the vocabulary differently per chunk shape, which reorders its sums), the head's dW to 1e-6.
 */
async function compare(c: Case, rows: number, chunks: number): Promise<void> {
  const whole = await step(c);
  const part = await step(c, rows);
  const V = c.cfg.vocab_size;
  expect(whole.plan.logitsRows).toBe(c.B * c.T);
  expect(part.plan.logitsRows).toBe(rows);
  expect(Math.ceil((c.B * c.T) / rows)).toBe(chunks);
  expect(part.plan.buffers.find((b) => b.key === 'logits')!.bytes).toBe(rows * V * 4);
  expect(part.chunkedLogits).toBe(true);
  expect(part.loss).toBe(whole.loss);
  expect(part.losses).toEqual(whole.losses);
  expect(part.evalLoss).toBe(whole.loss);
  expect(whole.evalLoss).toBe(whole.loss);
  expect(maxRel(part.dres, whole.dres)).toBeLessThan(1e-5);
  const layout = c.opts.lora ? null : paramLayout(c.cfg);
  const head = layout?.byName.get(c.cfg.tie_word_embeddings ? 'model.embed_tokens.weight' : 'lm_head.weight');
  const [lo, hi] = head ? [head.offset, head.offset + head.size] : [0, 0];
  const rest = (g: Float32Array) => Float32Array.from(g.filter((_, i) => i < lo || i >= hi));
  expect(maxRel(rest(part.grads), rest(whole.grads))).toBeLessThan(1e-5);
  if (head) {
    const [a, b] = [part.grads.subarray(lo, hi), whole.grads.subarray(lo, hi)];
    expect(maxRel(a, b)).toBeLessThan(1e-6);
  }
}

describe('LM head over chunks of tokens', () => {
  it('full training, tied, loss-scaled, hF stored INT4 (dequantized a chunk of rows at a time), a shorter last chunk: loss equals the whole head\'s bit for bit, dX and gradients to 1e-5, its dW to 1e-6', async () => {
    const scheme = parseScheme({ name: 'head4', layer: { saved: { head_input: { format: 'int4', granularity: 'group', group: 32, rounding: 'nearest' } } } });
    const opts: ResolveOptions = { scheme, lossScale: { always: true, initScale: 2 ** 10 } };
    const c: Case = { cfg: micro, B: 10, T: 16, opts };
    const p = resolvePlan(c.cfg, c.B, c.T, opts);
    expect([p.saved[1].hF?.format, p.lossScale?.initScale]).toEqual(['int4', 2 ** 10]);
    await compare(c, 64, 3);
  }, 300_000);

  it('LoRA under f16 compute (the f32 twin; frozen head: dX only): loss bit for bit, adapter gradients and dX to 1e-5', async () => {
    const opts: ResolveOptions = { scheme: SCHEME_PRESETS.f16, f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true, lora: defaultLoraSpec(4, { alpha: 8 }) };
    expect(resolvePlan(micro, 2, 16, opts).f16?.layers[0].forward).toBe('f16-simt');
    await compare({ cfg: micro, B: 2, T: 16, opts }, 12, 3);
  }, 300_000);
});
