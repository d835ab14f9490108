/**
 * The held-out loss a group's members compute alike: batches every member draws the same (a
 * function of the run's data seed and a key, never a training step's batch) and the model's mean
 * forward loss over them. DiLoCo judges pseudo-gradients with it (diloco/held-out.ts); data
 * parallel's sync judges a starting state that no majority vouched for (dp/sync.ts).
 */
import type { Trainer } from '../engine/train/trainer';
import { inMemoryData, type Split } from '../engine/train/data/data';

/** Held-out batches per evaluation (each the trainer's B × T): more batches, less noise, more forwards. */
export const DEFAULT_HELD_OUT_BATCHES = 4;
export const MAX_HELD_OUT_BATCHES = 64;

/** Split step of key t's held-out batch j: far from the run's evaluation batches 0..k−1 and its training steps. */
export const heldOutBatchStep = (key: number, j = 0, batches = 1): number => 0x40000000 + (((key >>> 0) * batches + j) % 0x3fffffff);

/** Held-out batch j of key t: rows [B, T+1] of `split` (the trainer's batch and context, its data seed). */
export function heldOutBatch(trainer: Trainer, key: number, j = 0, batches = 1, split: Split = 'val'): Int32Array {
  return inMemoryData(trainer.data).rows(heldOutBatchStep(key, j, batches), trainer.opts.seq, split, 0, trainer.opts.batch);
}

/**
 * The split held-out batches come from: the validation split when it holds a row (T + 1 tokens);
 * else the training split, whose batch at a step no run reaches (heldOutBatchStep) is still one
 * batch fixed by the shared seed, alike on every member, though a state fitted to it looks better there.
 */
export function heldOutSplit(trainer: Trainer): Split {
  return inMemoryData(trainer.data).val.length > trainer.opts.seq ? 'val' : 'train';
}

/** The `count` held-out batches of key t (count checked: an integer in [1, MAX_HELD_OUT_BATCHES]). */
export function heldOutBatches(trainer: Trainer, key: number, count: number, split: Split = 'val'): Int32Array[] {
  if (!(Number.isSafeInteger(count) && count >= 1 && count <= MAX_HELD_OUT_BATCHES)) throw new Error(`held-out batches must be an integer in [1, ${MAX_HELD_OUT_BATCHES}], got ${count}`);
  return Array.from({ length: count }, (_, j) => heldOutBatch(trainer, key, j, count, split));
}

/**
 * Mean forward loss of the model's weights as they stand over `batches` (no dropout; each batch's
 * loss copied into `out`, read back once at the end). The batch and step seed are left as set
 * here: the next training step sets its own. `out` holds at least 4 × batches bytes.
 */
export async function heldOutLoss(trainer: Trainer, batches: Int32Array[], seed: number, out: GPUBuffer): Promise<number> {
  const { model } = trainer;
  const rt = model.rt;
  await trainer.settle();
  model.setStepSeed(seed);
  model.lora?.setDropoutActive(false);
  try {
    batches.forEach((b, j) => {
      model.setBatch(b);
      rt.run(model.lossForward, (enc) => enc.copyBufferToBuffer(model.b('loss'), 0, out, 4 * j, 4));
    });
    const l = new Float32Array(await rt.read(out, 0, 4 * batches.length));
    return l.reduce((a, x) => a + x, 0) / l.length;
  } finally {
    model.lora?.setDropoutActive(true);
  }
}

/**
 * Held-out loss of the model's own trainable weights and of `other` in their place, on the same
 * batches (key `key`, heldOutSplit's split): the own weights are read aside and written back bit
 * for bit, whatever happens.
 */
export async function compareHeldOut(trainer: Trainer, other: Float32Array, key: number, count = DEFAULT_HELD_OUT_BATCHES): Promise<{ own: number; other: number; split: Split }> {
  const { model } = trainer;
  const split = heldOutSplit(trainer);
  const batches = heldOutBatches(trainer, key, count, split);
  await trainer.settle();
  const mine = await model.readTrainable('weights');
  if (other.length !== mine.length) throw new Error(`compareHeldOut: the other weights have ${other.length} floats, the model ${mine.length}`);
  const out = model.rt.createBuffer('workspace', 'heldout.losses', 4 * count);
  try {
    const own = await heldOutLoss(trainer, batches, heldOutBatchStep(key), out);
    model.writeTrainable('weights', other);
    try {
      return { own, other: await heldOutLoss(trainer, batches, heldOutBatchStep(key), out), split };
    } finally {
      model.writeTrainable('weights', mine);
    }
  } finally {
    model.rt.mem.free(out);
  }
}
