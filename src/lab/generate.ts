/**
 * Generation throughput: a Decoder (KV cache) over a preset's seeded initial weights at the
 * preset's context, a prompt prefilled, then tokens sampled one step at a time. Decode tokens/s
 * counts only the steps after the prefill, timed by wall clock from the step's submit to its logits
 * on the host (what a reader of streamed text waits for); the prefill is reported apart.
 */
import type { Runtime } from '../engine/gpu/runtime';
import { median } from '../engine/gpu/timer';
import type { PresetName } from '../engine/model/config';
import { Decoder } from '../engine/model/decode';
import { generateTokens } from '../engine/model/generate';
import { initParams, paramLayout } from '../engine/model/params';
import { defaultTrainOptions } from '../engine/train/options';
import { Rng } from '../engine/util/rng';
import { SYNTHETIC_VOCAB } from './step';

export interface GenerateBenchOptions {
  preset: PresetName;
  /** Context the cache holds (default the preset recipe's seq). */
  seq?: number;
  /** Prompt tokens prefilled before the timed steps. */
  prompt: number;
  /** Tokens per run (capped by the context). */
  tokens: number;
  warmup: number;
  reps: number;
}

export interface GenerateBench {
  preset: PresetName;
  ctx: number;
  prompt: number;
  /** Decode steps per timed run. */
  steps: number;
  /** Median over runs of decode tokens/s (steps / their wall time). */
  tokensPerS: number;
  msPerToken: number;
  prefillMs: number;
  samples: number[];
}

export async function benchGenerate(rt: Runtime, o: GenerateBenchOptions): Promise<GenerateBench> {
  const opts = defaultTrainOptions(o.preset, { seq: o.seq, model: { vocab_size: SYNTHETIC_VOCAB } });
  const cfg = opts.model;
  const ctx = opts.seq;
  const prompt = Math.min(o.prompt, ctx - 1);
  const layout = paramLayout(cfg);
  const weights = rt.upload('weights', 'bench.weights', initParams(cfg, layout, opts.seed));
  const dec = new Decoder(rt, cfg, weights, ctx);
  try {
    const rng = new Rng(1);
    const ids = Array.from({ length: prompt }, () => rng.int(cfg.vocab_size));
    const maxTokens = Math.min(o.tokens, ctx - prompt + 1);
    const tps: number[] = [];
    const prefill: number[] = [];
    let steps = 0;
    for (let i = 0; i < o.warmup + o.reps; i++) {
      const it = generateTokens(dec, ids, { maxTokens, temperature: 1, topK: 0, topP: 1, seed: i });
      let r = await it.next();
      while (!r.done) r = await it.next();
      if (i < o.warmup) continue;
      steps = r.value.decodeSteps;
      tps.push(r.value.decodeSteps / (r.value.decodeMs / 1000));
      prefill.push(r.value.prefillMs);
    }
    const t = median(tps);
    return { preset: o.preset, ctx, prompt, steps, tokensPerS: t, msPerToken: 1000 / t, prefillMs: median(prefill), samples: tps };
  } finally {
    dec.destroy();
    rt.mem.free(weights);
  }
}
