/**
 * Calibration of the contribution screen (src/peers/collectives/screen.ts) on real training
 * gradients: one micro model trained data-parallel by `--members` simulated members in one process
 * (each step: every member's forward/backward on its rows of the global batch, the mean written
 * back, AdamW), and every step screened as the group would screen it, all-honest. Reports, per
 * group size (the first 2, 3, … members), how many steps the screen left anyone out (the false
 * positives), and the figures it judged by: the smallest pairwise cosine and the largest pairwise
 * norm ratio, with their quantiles, against the thresholds.
 *
 *   node scripts/run-node.mjs bench/screen-calibration.ts [--data public/data/tinyshakespeare.txt] --steps 400 --members 4 --batch 2 --seq 16 --lr 1e-2
 *
 * Prints one JSON object on stdout, progress on stderr.
 */
import { readFileSync } from 'node:fs';
import { parseCliArgs } from '../src/cli/common';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../src/engine/train/trainer';
import { rankGradients } from '../src/parallel/rank';
import { DEFAULT_SCREEN, screen, type ScreenData } from '../src/peers/collectives/screen';

/** ScreenData of explicit vectors, in fp64 as the JS backend computes it. */
function data(vs: Float32Array[]): ScreenData {
  const dot = (a: Float32Array, b: Float32Array) => {
    let s = 0;
    for (let i = 0; i < a.length; i++) s += a[i] * b[i];
    return s;
  };
  const n2 = vs.map((v) => dot(v, v));
  const G = vs.map((a, i) => vs.map((b, j) => (i === j ? n2[i] : j < i ? NaN : dot(a, b))));
  const g = (i: number, j: number) => (j < i ? G[j][i] : G[i][j]);
  return {
    finite: vs.map((v) => v.every(Number.isFinite)),
    norm2: n2,
    dots: (set) => {
      const dots = set.map((i) => set.reduce((s, j) => s + g(i, j), 0));
      return { dot: dots, sum2: dots.reduce((s, d) => s + d, 0) };
    },
  };
}

const q = (v: number[], p: number) => [...v].sort((a, b) => a - b)[Math.min(v.length - 1, Math.floor(p * v.length))];

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    data: { type: 'string' }, steps: { type: 'string' }, members: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, lr: { type: 'string' }, seed: { type: 'string' },
  });
  const steps = Number(a.steps ?? 400);
  const N = Number(a.members ?? 4);
  const text = readFileSync(a.data ?? 'public/data/tinyshakespeare.txt', 'utf8');
  const tok = CharTokenizer.fromText(text);
  const rt = new Runtime(await acquireNodeGpu());
  const o = defaultTrainOptions('micro', {
    steps, warmup: 10, lr: Number(a.lr ?? 1e-2), batch: Number(a.batch ?? 2), seq: Number(a.seq ?? 16), seed: Number(a.seed ?? 1337), model: { vocab_size: tok.vocabSize },
  });
  const t = await Trainer.create(rt, o, text, { tokenizer: tok });
  const sizes = Array.from({ length: N - 1 }, (_, i) => i + 2);
  const per = new Map(sizes.map((n) => [n, { screened: [] as number[], minCos: [] as number[], maxRatio: [] as number[], minProj: [] as number[] }]));
  const losses: number[] = [];
  const t0 = Date.now();
  for (let s = 0; s < steps; s++) {
    const gs: Float32Array[] = [];
    let loss = 0;
    for (let r = 0; r < N; r++) {
      loss += await rankGradients(t, s, { rank: r, world: N });
      gs.push(await t.model.readFlat('grads'));
    }
    losses.push(loss / N);
    for (const n of sizes) {
      const sub = gs.slice(0, n);
      const ids = sub.map((_, r) => `m${r}`);
      const sc = screen(ids, ids.map((_, r) => r), data(sub), DEFAULT_SCREEN);
      const figs = sc.figures;
      const p = per.get(n)!;
      if (sc.excluded.length) p.screened.push(s);
      // The screen judges directions from 3 members; the pair's cosine is computed here for the record.
      const c = n === 2 ? (() => {
        const d = data(sub);
        return (d.dots([0, 1]).dot[0] - d.norm2[0]) / Math.sqrt(d.norm2[0] * d.norm2[1]);
      })() : figs.minCosine!;
      p.minCos.push(c);
      p.maxRatio.push(figs.maxNormRatio);
      p.minProj.push(n === 2 ? (() => {
        const d = data(sub);
        const g = d.dots([0, 1]).dot[0] - d.norm2[0];
        return Math.min(g / d.norm2[0], g / d.norm2[1]);
      })() : figs.minProjection!);
    }
    const mean = new Float32Array(gs[0].length);
    for (const g of gs) for (let i = 0; i < mean.length; i++) mean[i] += g[i] / N;
    rt.write(t.model.b('grads'), mean);
    await t.applyGradients();
    if (s % 25 === 0) process.stderr.write(`step ${s}: loss ${losses[s].toFixed(3)} (${((Date.now() - t0) / 1000).toFixed(0)} s)\n`);
  }
  const out = {
    command: `bench/screen-calibration.ts ${process.argv.slice(2).join(' ')}`,
    model: 'micro', batchPerMember: o.batch, seq: o.seq, lr: o.optimizer.lr, steps, screen: DEFAULT_SCREEN,
    loss: { first: losses[0], last: losses[steps - 1] },
    sizes: sizes.map((n) => {
      const p = per.get(n)!;
      return {
        members: n,
        stepsScreened: p.screened.length,
        falsePositiveRate: p.screened.length / steps,
        screenedAt: p.screened.slice(0, 20),
        minPairCosine: { min: Math.min(...p.minCos), p01: q(p.minCos, 0.01), p50: q(p.minCos, 0.5) },
        maxPairNormRatio: { max: Math.max(...p.maxRatio), p99: q(p.maxRatio, 0.99), p50: q(p.maxRatio, 0.5) },
        minPairProjection: { min: Math.min(...p.minProj), p01: q(p.minProj, 0.01), p50: q(p.minProj, 0.5) },
      };
    }),
  };
  console.log(JSON.stringify(out, null, 2));
  t.destroy();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
