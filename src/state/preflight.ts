/**
 * A pre-flight check of the next run's buffer plan against the WebGPU adapter's limits (no GPU
 * work: the plan is the engine's own list of buffers). A buffer over maxBufferSize, or one bound
 * whole as storage over maxStorageBufferBindingSize, would fail when the worker allocates it,
 * after minutes of compiling: the page says so before Start instead.
 */
import type { BufferSpec } from '../engine/model/plan';
import { resolveTrainingPlan } from '../engine/plan/train-plan';
import type { TrainOptions } from '../engine/train/options';

export interface AdapterLimits {
  maxBufferSize: number;
  maxStorageBufferBindingSize: number;
}

/** GPUBufferUsage.STORAGE (the constant is absent outside a WebGPU context). */
const STORAGE = 0x80;

export interface Preflight {
  largest: BufferSpec | null;
  /** Why the plan cannot run on this adapter (null = it fits its limits). */
  problem: string | null;
}

const mib = (n: number) => (n >= 2 ** 30 ? `${(n / 2 ** 30).toFixed(n < 2 ** 34 ? 2 : 0)} GiB` : `${(n / 2 ** 20).toFixed(n < 2 ** 24 ? 1 : 0)} MiB`);

export function preflight(opts: TrainOptions, limits: AdapterLimits | undefined): Preflight {
  const plan = resolveTrainingPlan(opts).buffers;
  const largest = plan.reduce<BufferSpec | null>((a, b) => (a === null || b.bytes > a.bytes ? b : a), null);
  if (!limits || !largest) return { largest, problem: null };
  const tooBig = plan.filter((b) => b.bytes > limits.maxBufferSize).sort((a, b) => b.bytes - a.bytes);
  if (tooBig.length) {
    return {
      largest,
      problem: `${tooBig.length} buffer${tooBig.length > 1 ? 's' : ''} of this plan exceed${tooBig.length > 1 ? '' : 's'} this GPU's maxBufferSize (${mib(limits.maxBufferSize)}): the largest, ${tooBig[0].key}, is ${mib(tooBig[0].bytes)}. Lower batch × context or the model's hidden size / vocabulary`,
    };
  }
  const unbindable = plan.filter((b) => (b.usage === undefined || (b.usage & STORAGE) !== 0) && b.bytes > limits.maxStorageBufferBindingSize).sort((a, b) => b.bytes - a.bytes);
  if (unbindable.length) {
    return {
      largest,
      problem: `${unbindable[0].key} (${mib(unbindable[0].bytes)}) is larger than this GPU's maxStorageBufferBindingSize (${mib(limits.maxStorageBufferBindingSize)}), the most a shader can bind at once. Lower batch × context or the model's size`,
    };
  }
  return { largest, problem: null };
}
