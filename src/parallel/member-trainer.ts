/**
 * What a group member (data parallel, DiLoCo) does with its own Trainer alone: every member holds the
 * same state, so evaluation, samples, checkpoints and memory are the local trainer's. The group
 * drivers extend it with their step.
 */
import type { MemReport } from '../engine/gpu/memory';
import type { CheckpointFiles } from '../engine/io/checkpoint';
import type { QuantErrorRecord } from '../engine/train/probe';
import type { Trainer } from '../engine/train/trainer';

export abstract class MemberTrainer {
  constructor(readonly trainer: Trainer) {}

  /** The trainer's step index (a joiner's jumps to the group's when it receives the state). */
  get stepIndex(): number {
    return this.trainer.stepIndex;
  }

  /** A group step waits on its exchange, so nothing is submitted ahead and nothing is in flight. */
  async settle(): Promise<null> {
    return null;
  }

  /** This member's validation loss, which is the group's (not a collective). */
  evaluate(): Promise<number> {
    return this.trainer.evaluate();
  }

  quantErrors(): Promise<QuantErrorRecord[]> {
    return this.trainer.quantErrors();
  }

  sample(prompt: string, maxNew: number, temperature: number, seed: number): Promise<string> {
    return this.trainer.sample(prompt, maxNew, temperature, seed);
  }

  /** Saves the run (any member's checkpoint is the group's). */
  checkpoint(): Promise<CheckpointFiles> {
    return this.trainer.checkpoint();
  }

  memory(): MemReport {
    return this.trainer.memory();
  }
}
