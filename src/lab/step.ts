/**
 * Training-step throughput: a Trainer of a preset and scheme on synthetic text, `warmup` steps
 * untimed, then the median of `reps` steps. A step is what `npm run train` does per step (forward,
 * backward, AdamW in one command buffer, then the loss read back), timed by wall clock from the
 * batch upload to the loss on the host, so it includes the per-step sync a real run pays.
 * The text is random over 65 symbols (the size of TinyShakespeare's alphabet): throughput does not
 * depend on what the characters are, and the GPU machine has no corpus to read.
 */
import type { Runtime } from '../engine/gpu/runtime';
import type { MemReport } from '../engine/gpu/memory';
import { gemmPathSummary, gemmSplitSummary, type LayerPaths } from '../engine/model/int8-gemms';
import { median, timeDispatches } from '../engine/gpu/timer';
import type { PresetName } from '../engine/model/config';
import type { WeightCodesMode } from '../engine/model/weight-codes';
import type { Scheme } from '../engine/scheme/scheme';
import { defaultTrainOptions, type TrainOptions } from '../engine/train/options';
import { CharTokenizer } from '../engine/train/tokenizer/tokenizer';
import { Trainer } from '../engine/train/trainer';
import { Rng } from '../engine/util/rng';

export const SYNTHETIC_VOCAB = 65;

/** Random text over SYNTHETIC_VOCAB printable symbols, long enough for `batch` windows of seq+1 in both splits. */
export function syntheticText(batch: number, seq: number, seed = 1): string {
  const alphabet = Array.from({ length: SYNTHETIC_VOCAB }, (_, i) => String.fromCharCode(33 + i)).join('');
  const n = Math.max(1 << 16, 20 * batch * (seq + 1));
  const rng = new Rng(seed);
  const out = new Array<string>(n);
  for (let i = 0; i < n; i++) out[i] = alphabet[rng.int(SYNTHETIC_VOCAB)];
  return out.join('');
}

export interface StepBenchOptions {
  preset: PresetName;
  scheme: Scheme;
  /** Overrides of the preset's recipe (default: the recipe's batch and context). */
  batch?: number;
  seq?: number;
  warmup: number;
  reps: number;
  /** Also time the step's dispatches with timestamps where the GPU has them (default true; the tune's step check needs only the wall time). */
  gpuTime?: boolean;
}

export interface StepBench {
  preset: PresetName;
  scheme: string;
  batch: number;
  seq: number;
  /** The model as trained (HF config keys; vocab from the synthetic text). */
  model: TrainOptions['model'];
  optimizer: TrainOptions['optimizer'];
  tokensPerS: number;
  msPerStep: number;
  samplesMs: number[];
  /**
   * GPU time of the step's dispatches (forward, backward, AdamW: one pass, timestamp queries),
   * median over reps; absent without timestamps. The wall-clock figure adds the loss readback and
   * whatever delay the host's event loop adds before it sees the GPU finish (Dawn in Node polls).
   */
  gpuMsPerStep?: number;
  gpuTokensPerS?: number;
  /** The kernel each layer's forward, dX and dW GEMMs ran, and the distinct combinations in words. */
  gemmPaths: LayerPaths[];
  gemmPathSummary: string;
  /** The INT8 dW GEMMs that ran split over K and their slice counts (gemmSplitSummary). */
  gemmSplits: string;
  /** When the INT8 GEMMs' weight codes were made (the plan's weightCodes). */
  weightCodes: WeightCodesMode;
  /** The memory ledger of the run (bytes per category) and the plan's prediction (trainer.plan.memory). */
  mem: MemReport;
  plan: MemReport;
}

/** A Trainer of a preset and scheme on syntheticText (batch and context: the recipe's unless given), for `steps` steps. */
export async function syntheticTrainer(rt: Runtime, o: { preset: PresetName; scheme: Scheme; batch?: number; seq?: number; steps: number }): Promise<Trainer> {
  const text = syntheticText(o.batch ?? 64, o.seq ?? 512);
  const tokenizer = CharTokenizer.fromText(text);
  const opts = defaultTrainOptions(o.preset, {
    batch: o.batch, seq: o.seq, steps: o.steps, evalEvery: 0,
    model: { vocab_size: tokenizer.vocabSize }, scheme: o.scheme,
  });
  return Trainer.create(rt, opts, text, { tokenizer });
}

export async function benchStep(rt: Runtime, o: StepBenchOptions): Promise<StepBench> {
  const trainer = await syntheticTrainer(rt, { ...o, steps: o.warmup + o.reps });
  const { opts } = trainer;
  try {
    const samples: number[] = [];
    for (let i = 0; i < o.warmup + o.reps; i++) {
      const t0 = performance.now();
      // As a training loop runs them: the next step is submitted before this one's loss is read.
      await trainer.trainStep({ next: i + 1 < o.warmup + o.reps });
      if (i >= o.warmup) samples.push(performance.now() - t0);
    }
    const ms = median(samples);
    const gpu = rt.gpu.features.timestampQuery && o.gpuTime !== false
      ? await timeDispatches(rt, trainer.stepDispatches(), { warmup: 1, reps: o.reps })
      : undefined;
    const gpuMs = gpu?.method === 'timestamp' ? gpu.medianMs : undefined;
    return {
      preset: o.preset, scheme: o.scheme.name, batch: opts.batch, seq: opts.seq, model: trainer.opts.model, optimizer: trainer.opts.optimizer,
      tokensPerS: (opts.batch * opts.seq) / (ms / 1000), msPerStep: ms, samplesMs: samples,
      gpuMsPerStep: gpuMs, gpuTokensPerS: gpuMs === undefined ? undefined : (opts.batch * opts.seq) / (gpuMs / 1000),
      gemmPaths: trainer.computePaths(), gemmPathSummary: gemmPathSummary(trainer.computePaths()),
      gemmSplits: gemmSplitSummary(trainer.gemmSplits()),
      weightCodes: trainer.model.plan.weightCodes,
      mem: trainer.memory(), plan: trainer.plan.memory,
    };
  } finally {
    trainer.destroy();
  }
}

