/**
 * A rank's part of a step, the one definition data parallel, DiLoCo and tensor parallel share.
 *
 * Rows: step s has a global batch of world·accumulate·B rows (TextDataset's rows of the seed and s);
 * rank r's micro-batch j is rows [(r·accumulate + j)·B, +B). B is the local batch (TrainOptions.batch),
 * so the global batch always divides by the world: a function of (seed, step, rank, world) only, and
 * the rows re-shard by themselves when the membership changes. Tensor-parallel ranks all feed the
 * same rows: each is data-parallel rank 0 of 1.
 *
 * Step: forward/backward on the slice leaves the gradient in the model's storage (rankGradients);
 * what follows is the strategy's — DP's verified mean then the optimizer (dp/step.ts), DiLoCo's
 * local optimizer step (diloco/diloco.ts).
 */
import { type BatchSource, inMemoryData } from '../engine/train/data/data';
import type { BackwardSegments, Trainer } from '../engine/train/trainer';

export interface RankSlice {
  /** This rank's index among the data-parallel ranks. */
  rank: number;
  world: number;
  /** The micro-batch of this step (0 ≤ micro < accumulate; default 0). */
  micro?: number;
  /** Micro-batches per rank per step (default 1). */
  accumulate?: number;
}

const int = (name: string, v: number, min: number) => {
  if (!Number.isSafeInteger(v) || v < min) throw new Error(`rank slice: ${name} must be an integer ≥ ${min}, got ${v}`);
};

/** Rows [r0, r1) of the step's global batch (world·accumulate·batch rows) that `s` trains. */
export function rankRows(batch: number, s: RankSlice): [number, number] {
  const k = s.accumulate ?? 1;
  const j = s.micro ?? 0;
  int('batch', batch, 1);
  int('world', s.world, 1);
  int('accumulate', k, 1);
  int('rank', s.rank, 0);
  int('micro', j, 0);
  if (s.rank >= s.world) throw new Error(`rank slice: rank ${s.rank} is not below world ${s.world}`);
  if (j >= k) throw new Error(`rank slice: micro-batch ${j} is not below accumulate ${k}`);
  const r0 = (s.rank * k + j) * batch;
  return [r0, r0 + batch];
}

/** The rank's rows [B, T+1] of training step `step`. */
export function rankBatch(data: BatchSource, o: { batch: number; seq: number }, step: number, s: RankSlice): Int32Array {
  const [r0, r1] = rankRows(o.batch, s);
  return inMemoryData(data).rows(step, o.seq, 'train', r0, r1);
}

/**
 * Forward and backward on the rank's slice of step `step` (the trainer's own step's seeds): the
 * loss; the gradient stays in the model's storage for the strategy to reduce or apply.
 */
export function rankGradients(trainer: Trainer, step: number, s: RankSlice, segments?: BackwardSegments): Promise<number> {
  return trainer.computeGradients(rankBatch(trainer.data, trainer.opts, step, s), segments);
}
