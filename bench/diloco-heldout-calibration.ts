/**
 * Calibration of DiLoCo's held-out check (src/parallel/diloco/held-out.ts): an all-honest group
 * (micro on one device, loopback) runs many outer steps with the check measuring only (bound 1e9:
 * nothing left out); per outer step and candidate, the relative rise of the held-out loss with its
 * Δ applied alone, and what a sign-flipped insider would have caused — −(the last step's honest mean
 * Δ), and −4 × it, evaluated at the next outer step on the same evaluator. Reports the honest rises' quantiles,
 * the false-positive rate at the default bound (and others), and the sign flips' rises.
 *
 *   node scripts/run-node.mjs bench/diloco-heldout-calibration.ts --outer 200 --members 2 --h 2 [--batches 4] [--out FILE] [--cpu]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fail, num, parseCliArgs } from '../src/cli/common';
import { DiLoCo } from '../src/parallel/diloco/diloco';
import { DEFAULT_HELD_OUT_BATCHES } from '../src/parallel/held-out';
import { DEFAULT_MAX_RISE } from '../src/parallel/diloco/held-out';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../src/engine/train/trainer';
import { LoopbackHub } from '../src/peers/transport/loopback';

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), { outer: { type: 'string' }, members: { type: 'string' }, h: { type: 'string' }, lr: { type: 'string' }, batches: { type: 'string' }, out: { type: 'string' }, cpu: { type: 'boolean' } });
  const outer = num('outer', a.outer, { int: true, min: 2 }) ?? 200;
  const members = num('members', a.members, { int: true, min: 1 }) ?? 2;
  const H = num('h', a.h, { int: true, min: 1 }) ?? 2;
  const lr = num('lr', a.lr, { min: 0 }) ?? 1e-2;
  const batches = num('batches', a.batches, { int: true, min: 1 }) ?? DEFAULT_HELD_OUT_BATCHES;
  const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 100_000);
  const tok = CharTokenizer.fromText(text);
  // The peer tests' micro recipe (tests/helpers/trainer-pool.ts), run long.
  const options = defaultTrainOptions('micro', { steps: outer * H + 10, warmup: 1, lr, batch: 2, seq: 16, evalEvery: 0, model: { vocab_size: tok.vocabSize } });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  const trainers: Trainer[] = [];
  for (let i = 0; i < members; i++) trainers.push(await Trainer.create(rt, options, text, { tokenizer: tok }));
  const { transports } = LoopbackHub.group(members);
  const ids = transports.map((t) => t.id);
  const ds = trainers.map((t, i) => new DiLoCo(t, transports[i], { run: 'heldout-cal', mode: 'fp32', members: ids, silenceMs: 600_000, diloco: { innerSteps: H, wire: 'int8', heldOut: 1e9, heldOutBatches: batches } }));
  const rises: number[] = [];
  const flips: { outerStep: number; rise: number; rise4: number }[] = [];
  let last: { outerStep: number; deltas: Float32Array[] } | null = null;
  ds[0].onHeldOut = (x) => {
    for (const v of x.figures.after.values()) rises.push((v - x.figures.before) / Math.abs(x.figures.before));
    last = { outerStep: x.outerStep, deltas: [...x.candidates.values()] };
  };
  const summary = () => {
    const sorted = [...rises].sort((x, y) => x - y);
    const q = (p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
    const fp = (b: number) => rises.filter((r) => r > b).length;
    const bounds = [0.005, 0.01, 0.02, DEFAULT_MAX_RISE, 0.1];
    const flipRises = flips.map((f) => f.rise).sort((x, y) => x - y);
    const result = {
      command: ['diloco-heldout-calibration', ...process.argv.slice(2)].join(' '),
      date: new Date().toISOString(), adapter: gpu.adapterInfo, preset: 'micro', batch: 2, seq: 16, lr, H, members, outer, wire: 'int8', heldOutBatches: batches,
      lossLast: loss, honestCandidates: rises.length,
      honestRise: { min: sorted[0], median: q(0.5), p99: q(0.99), max: sorted.at(-1) },
      falsePositives: Object.fromEntries(bounds.map((b) => [String(b), { count: fp(b), rate: fp(b) / rises.length }])),
      defaultBound: DEFAULT_MAX_RISE,
      signFlip: { evaluated: flips.length, min: flipRises[0], median: flipRises[Math.floor(flipRises.length / 2)], caughtAtDefault: flips.filter((f) => f.rise > DEFAULT_MAX_RISE).length, times4: { min: Math.min(...flips.map((f) => f.rise4)), caughtAtDefault: flips.filter((f) => f.rise4 > DEFAULT_MAX_RISE).length }, first: flips.slice(0, 10) },
      seconds: (performance.now() - t0) / 1000,
    };
    return result;
  };
  const t0 = performance.now();
  let loss = 0;
  for (let s = 0; s < outer * H; s++) {
    const st = await Promise.all(ds.map((d) => d.step()));
    loss = st[0].loss ?? NaN;
    const seen = last as { outerStep: number; deltas: Float32Array[] } | null;
    if (seen && (s + 1) % H === 0) {
      // What −(this step's honest mean Δ) would do at the next outer step (a sign-flipping insider's aim).
      const mean = new Float32Array(seen.deltas[0].length);
      for (const d of seen.deltas) for (let i = 0; i < mean.length; i++) mean[i] -= d[i] / seen.deltas.length;
      const f = await ds[0].heldOut!.evaluate(seen.outerStep + 1, ds[0].outer.fragments[0], new Map([[0, mean], [1, mean.map((v) => 4 * v)]]), batches);
      flips.push({ outerStep: seen.outerStep + 1, rise: (f.after.get(0)! - f.before) / Math.abs(f.before), rise4: (f.after.get(1)! - f.before) / Math.abs(f.before) });
      last = null;
    }
    if ((s + 1) % (H * 10) === 0 && a.out) writeFileSync(a.out, JSON.stringify(summary(), null, 2)); // partial results survive a kill
    if ((s + 1) % (H * 10) === 0) console.error(`outer ${(s + 1) / H}: loss ${loss.toFixed(3)}, max honest rise ${(100 * Math.max(...rises)).toFixed(2)} %, ${((performance.now() - t0) / 1000).toFixed(0)} s`);
  }
  const json = JSON.stringify(summary(), null, 2);
  if (a.out) writeFileSync(a.out, json);
  console.log(json);
  for (const d of ds) {
    d.stop('calibration done');
    d.destroy();
  }
  for (const t of trainers) t.destroy();
  rt.destroy();
  process.exit(0);
}

main().catch(fail);
