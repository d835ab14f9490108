import { readFileSync } from 'node:fs';
import { afterAll, beforeAll } from 'vitest';
import { defaultTrainOptions, type TrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { type FlatTrainingState, Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from './gpu';

/**
 * Micro fp32 trainers a GPU test file of the peer group reuses (building one compiles shaders),
 * each reset to the same step-0 state by `fresh`. Call once at the top level of the file
 * (`buildTimeoutMs`: the hook's limit for building them, default the runner's).
 */
export function microTrainerPool(count = 3, buildTimeoutMs?: number) {
  const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 100_000);
  const tok = CharTokenizer.fromText(text);
  const B = 2;
  const optsFor = (o: Parameters<typeof defaultTrainOptions>[1] = {}): TrainOptions =>
    defaultTrainOptions('micro', { steps: 40, warmup: 1, lr: 1e-2, batch: B, seq: 16, model: { vocab_size: tok.vocabSize }, ...o });
  const pool: Trainer[] = [];
  const state: { initial: FlatTrainingState | null } = { initial: null };
  beforeAll(async () => {
    const rt = await testRuntime();
    for (let i = 0; i < count; i++) pool.push(await Trainer.create(rt, optsFor(), text, { tokenizer: tok }));
    state.initial = await pool[0].trainingState();
  }, buildTimeoutMs);
  afterAll(() => pool.forEach((t) => t.destroy()));
  const initial = () => state.initial!;
  return {
    text, tok, B, optsFor, pool, initial,
    /** The first n trainers, back at the step-0 state. */
    fresh(n: number): Trainer[] {
      const ts = pool.slice(0, n);
      for (const t of ts) t.restoreTrainingState(initial());
      return ts;
    },
  };
}
