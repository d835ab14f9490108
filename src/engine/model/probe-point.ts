import type { Binding, Dispatch } from '../gpu/runtime';
import type { SavedStorage } from './plan';

/** Where the forward holds a tensor `x` and its quantized form: packed codes (`stored`) or a fake-quantized copy (`xhat`). */
export interface ProbePoint {
  /** The dispatch after which both are valid (until later dispatches reuse the buffers). */
  after: Dispatch;
  x: Binding;
  n: number;
  stored?: { storage: SavedStorage; words: GPUBuffer; scales: GPUBuffer };
  xhat?: Binding;
}
