/**
 * The lab's PEFT files against PEFT's own (issue 39). ours/ is written by scripts/make-lora-ours.ts
 * and loaded by PEFT in tools/make-lora-fixture.py --check-ours; base/, adapter-init/,
 * adapter-final/ and replay.json are made by that script with torch + transformers + PEFT (run on a
 * machine that has them; the tests on them skip until the fixture is committed).
 */
import { existsSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { loadCheckpoint } from '../../../src/engine/io/checkpoint';
import { readSafetensors } from '../../../src/engine/io/safetensors';
import { RefLoraTrainer } from '../../../src/engine/lora/lora-train.ref';
import { exportPeftAdapter, importPeftAdapter, type PeftFilesIn } from '../../../src/engine/lora/peft';
import { validateModelConfig } from '../../../src/engine/model/config';

const DIR = 'tests/fixtures/lora-peft';
const adapterFiles = (d: string): PeftFilesIn => ({
  'adapter_config.json': readFileSync(`${d}/adapter_config.json`, 'utf8'),
  'adapter_model.safetensors': new Uint8Array(readFileSync(`${d}/adapter_model.safetensors`)),
});
const relErr = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

describe('ours/: the adapter PEFT is asked to load', () => {
  it('imports as expected.json says, and exporting it again gives the same bytes (the exporter has not drifted)', () => {
    const want = JSON.parse(readFileSync(`${DIR}/ours/expected.json`, 'utf8'));
    const cfg = validateModelConfig(want.model);
    const files = adapterFiles(`${DIR}/ours`);
    const got = importPeftAdapter(cfg, files);
    expect(got.spec).toEqual({ rank: want.rank, alpha: want.alpha, dropout: want.dropout, targets: want.targets });
    const again = exportPeftAdapter(cfg, got.spec, got.tensors, { baseModel: got.baseModel ?? undefined });
    expect(again['adapter_config.json']).toBe(files['adapter_config.json']);
    expect(Buffer.from(again['adapter_model.safetensors']).equals(Buffer.from(files['adapter_model.safetensors'] as Uint8Array))).toBe(true);
  });
});

const haveFixture = existsSync(`${DIR}/replay.json`);

describe.skipIf(!haveFixture)('the PyTorch + PEFT fixture (tools/make-lora-fixture.py)', () => {
  const replay = haveFixture ? JSON.parse(readFileSync(`${DIR}/replay.json`, 'utf8')) : null;
  const base = () => loadCheckpoint({
    'config.json': readFileSync(`${DIR}/base/config.json`, 'utf8'),
    'model.safetensors': new Uint8Array(readFileSync(`${DIR}/base/model.safetensors`)),
  });

  it("imports PEFT's adapters; exporting them again gives PEFT's safetensors byte for byte", () => {
    const { config } = base();
    expect(config).toEqual(validateModelConfig(replay.model));
    for (const d of ['adapter-init', 'adapter-final']) {
      const files = adapterFiles(`${DIR}/${d}`);
      const got = importPeftAdapter(config, files);
      expect(got.spec).toEqual(replay.lora);
      if (got.ignoredKeys.length) console.log(`${d}: config keys newer than the lab knows: ${got.ignoredKeys.join(', ')}`);
      const again = exportPeftAdapter(config, got.spec, got.tensors);
      expect(Buffer.from(again['adapter_model.safetensors']).equals(Buffer.from(files['adapter_model.safetensors'] as Uint8Array)), d).toBe(true);
    }
  });

  it('the plain-TS LoRA step replays PEFT training: loss and grad norm per step within 1e-4 relative, the final adapter and Adam moments', () => {
    const { config, params } = base();
    const init = importPeftAdapter(config, adapterFiles(`${DIR}/adapter-init`));
    const tr = new RefLoraTrainer(config, init.spec, params, init.tensors);
    const { batch: B, seq: T } = replay;
    let worstLoss = 0, worstNorm = 0;
    for (let s = 0; s < replay.steps; s++) {
      const r = tr.trainStep(Int32Array.from((replay.tokens[s] as number[][]).flat()), B, T, replay.optimizer);
      worstLoss = Math.max(worstLoss, relErr(r.loss, replay.losses[s]));
      worstNorm = Math.max(worstNorm, relErr(r.gradNorm, replay.grad_norms[s]));
    }
    console.log(`LoRA replay vs PEFT: loss max rel diff ${worstLoss.toExponential(2)}, grad norm ${worstNorm.toExponential(2)}`);
    expect(worstLoss).toBeLessThan(1e-4);
    expect(worstNorm).toBeLessThan(1e-4);
    const final = importPeftAdapter(config, adapterFiles(`${DIR}/adapter-final`));
    const adam = readSafetensors(new Uint8Array(readFileSync(`${DIR}/adapter-final/adam-final.safetensors`))).tensors;
    const close = (what: string, got: ArrayLike<number>, want: ArrayLike<number>, rel: number) => {
      let worst = 0, scale = 0;
      for (let i = 0; i < want.length; i++) {
        worst = Math.max(worst, Math.abs(got[i] - want[i]));
        scale = Math.max(scale, Math.abs(want[i]));
      }
      expect(worst / scale, what).toBeLessThan(rel);
    };
    for (const [n, t] of tr.tensors) {
      close(n, t, final.tensors.get(n)!, 1e-4);
      close(`exp_avg.${n}`, tr.m.get(n)!, adam.get(`exp_avg.${n}`)!.data as Float32Array, 1e-3);
      close(`exp_avg_sq.${n}`, tr.v.get(n)!, adam.get(`exp_avg_sq.${n}`)!.data as Float32Array, 1e-3);
    }
    const first = Int32Array.from((replay.tokens[0] as number[][]).flat());
    expect(relErr(tr.lossAndGrad(first, B, T, false), replay.final_loss_batch0)).toBeLessThan(1e-4);
  });
});
