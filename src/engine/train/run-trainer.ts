/**
 * What the training loop (loop.ts) drives: one run's trainer, whichever way it trains (one device,
 * a data-parallel member, a tensor-parallel rank). Restoring a run is part of building one (each
 * kind's create takes TrainerInit); the loop only steps, evaluates, samples and checkpoints.
 */
import type { MemReport } from '../gpu/memory';
import type { CheckpointFiles } from '../io/checkpoint';
import type { QuantErrorRecord } from './probe';

export interface RunTrainer<M extends { step: number } = { step: number }> {
  /** The index of the next step to complete (a step submitted ahead is not counted yet). */
  readonly stepIndex: number;
  /**
   * Trains one step and returns its metrics. `next: true` promises that the next call is step()
   * again, so an implementation may submit that step before this one's result is read; one that
   * cannot simply ignores it.
   */
  step(o?: { next?: boolean }): Promise<M>;
  /** Completes a step submitted ahead: its metrics, or null when none is in flight. */
  settle(): Promise<M | null>;
  /** Mean validation loss (a collective where the trainer spans peers: every member calls it). */
  evaluate(): Promise<number>;
  /** Per-layer quantization error of the forward's quantized tensors; absent where not measured. */
  quantErrors?(): Promise<QuantErrorRecord[]>;
  /** Sampled text after `prompt`; absent where the trainer holds no sampler. */
  sample?(prompt: string, maxNew: number, temperature: number, seed: number): Promise<string>;
  /** The run's checkpoint files at stepIndex (a collective where the trainer spans peers). */
  checkpoint(): Promise<CheckpointFiles>;
  /** This run's allocated bytes per category. */
  memory(): MemReport;
}
