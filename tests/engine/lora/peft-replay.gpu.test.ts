/**
 * The engine's LoRA training (GPU) against an independent PyTorch + PEFT run recorded by
 * tools/make-lora-fixture.py (issue 39): the same base, the same initial adapter (PEFT's, with B
 * nonzero), the same 10 batches and AdamW settings; loss per step within 1e-4 relative, and the
 * final adapter close to PEFT's. Skips until the fixture is committed.
 */
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../../src/engine/io/checkpoint';
import { importPeftAdapter, type PeftFilesIn } from '../../../src/engine/lora/peft';
import type { BatchSource } from '../../../src/engine/train/data/data';
import { defaultTrainOptions, type TrainOptions } from '../../../src/engine/train/options';
import { CharTokenizer } from '../../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../../src/engine/train/trainer';
import { testRuntime } from '../../helpers/gpu';

const DIR = 'tests/fixtures/lora-peft';
const haveFixture = existsSync(`${DIR}/replay.json`);
const adapterFiles = (d: string): PeftFilesIn => ({
  'adapter_config.json': readFileSync(`${d}/adapter_config.json`, 'utf8'),
  'adapter_model.safetensors': new Uint8Array(readFileSync(`${d}/adapter_model.safetensors`)),
});

describe.skipIf(!haveFixture)('LoRA on the GPU against PyTorch + PEFT', () => {
  it('replays 10 PEFT steps: loss per step within 1e-4 relative, the final adapter within 1e-3', async () => {
    const replay = JSON.parse(readFileSync(`${DIR}/replay.json`, 'utf8'));
    const base = loadCheckpoint({
      'config.json': readFileSync(`${DIR}/base/config.json`, 'utf8'),
      'model.safetensors': new Uint8Array(readFileSync(`${DIR}/base/model.safetensors`)),
    });
    const init = importPeftAdapter(base.config, adapterFiles(`${DIR}/adapter-init`));
    const { batch: B, seq: T } = replay;
    const tokens = (replay.tokens as number[][][]).map((b) => Int32Array.from(b.flat()));
    const data: BatchSource = {
      batch: (step) => tokens[step],
      valBatches: (count) => tokens.slice(0, count),
    };
    const o = defaultTrainOptions('micro', { steps: replay.steps, batch: B, seq: T, evalEvery: 0 });
    const opts: TrainOptions = { ...o, model: base.config, optimizer: { ...o.optimizer, ...replay.optimizer }, lora: init.spec };
    const rt = await testRuntime();
    const t = await Trainer.create(rt, opts, '', { tokenizer: CharTokenizer.fromText('ab'), params: base.params, adapters: init.tensors, data });
    try {
      let worst = 0;
      for (let s = 0; s < replay.steps; s++) {
        const m = await t.trainStep();
        const rel = Math.abs(m.loss - replay.losses[s]) / replay.losses[s];
        worst = Math.max(worst, rel);
        expect(rel, `step ${s}: ours ${m.loss}, PEFT ${replay.losses[s]}`).toBeLessThan(1e-4);
      }
      const final = importPeftAdapter(base.config, adapterFiles(`${DIR}/adapter-final`)).tensors;
      const ours = await t.adapters();
      let dev = 0;
      for (const [k, want] of final) {
        const got = ours.get(k)!;
        let num = 0;
        let den = 0;
        for (let i = 0; i < want.length; i++) {
          num = Math.max(num, Math.abs(got[i] - want[i]));
          den = Math.max(den, Math.abs(want[i]));
        }
        dev = Math.max(dev, num / den);
      }
      console.log(`LoRA GPU vs PEFT over ${replay.steps} steps: worst loss rel diff ${worst.toExponential(2)}, final adapter ${dev.toExponential(2)}`);
      expect(dev).toBeLessThan(1e-3);
    } finally {
      t.destroy();
    }
  });
});
