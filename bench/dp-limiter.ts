/**
 * Data-parallel time per step over emulated slow links, fp32 against AGoQ's INT8 gradient exchange
 * (src/parallel/dp/bench.ts): prints one JSON object (command, date, adapter, link, rows) on stdout,
 * progress on stderr.
 *
 *   node scripts/run-node.mjs bench/dp-limiter.ts --model tiny --peers 2,3,4 --mbps 20 --latency 20
 *
 * On the GPU machine (no Node modules there), bundle it like the bench CLI (bench/README.md):
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/dp-limiter.ts dist-node/dp-limiter.mjs
 * Options: --model P (micro|tiny|small|base, default tiny) --scheme fp32|agoq (default fp32: the
 * storage; the exchange mode is what --modes varies) --modes fp32,int8 --peers 2,3,4 --steps N
 * (default 5) --warmup N (default 1) --mbps MB/s per peer uplink (default 20) --latency ms one-way
 * (default 20) --batch B --seq T (default: the preset's recipe) --accumulate K --bucket-floats N
 * (floats per exchanged bucket, a multiple of 256) --no-overlap (one encode after the whole
 * backward instead of buckets sent behind it) --cpu.
 *
 * Issue 38's defences (--defences): per step, in this process and alternated, the protocol rounds of
 * a DP step as the product runs them (commit-then-reveal verified all-reduce + pairwise screen,
 * signed and echoed REPORT) against the undefended protocol (bench/defence-cost.ts: two-shot
 * all-reduce, plain report gather) over a vector of the model's size, for each --peers and --modes;
 * then DiLoCo (--members, default the first --peers, H = --diloco-h, default 50) with the held-out
 * check on and off, alternated (--diloco-rounds timed outer steps each, default 2); the DP rows
 * above still run (the product's defended step, for the compute beside the rounds). --micro: micro
 * model, 2 peers, int8, 2 steps, H = 2 (a check on SwiftShader). --out FILE: the JSON there too.
 *
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/dp-limiter.ts dist-node/dp-limiter.mjs
 *   node dist-node/dp-limiter.mjs --defences --model small --scheme agoq --modes int8 --peers 2,4 --steps 8 --warmup 2 --mbps 100000 --latency 0 --out defences.json
 *   node dist-node/dp-limiter.mjs --defences --micro --cpu --out micro.json
 */
import { writeFileSync } from 'node:fs';
import { fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { benchDefences, type DefenceRow } from './defence-cost';
import { benchDiloco } from '../src/parallel/diloco/bench';
import type { TrainOptions } from '../src/engine/train/options';
import { Trainer } from '../src/engine/train/trainer';
import { benchDataParallel } from '../src/parallel/dp/bench';
import type { GradWire } from '../src/engine/scheme/wire';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { schemePreset } from '../src/engine/scheme/presets';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { syntheticText } from '../src/lab/step';

/** The model's parameter count (the exchanged vector's length), from a trainer built and dropped. */
async function paramsOf(rt: Runtime, options: TrainOptions, text: string): Promise<number> {
  const t = await Trainer.create(rt, options, text, { tokenizer: CharTokenizer.fromText(text) });
  const n = t.model.layout.totalFloats;
  t.destroy();
  return n;
}

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    model: { type: 'string' }, scheme: { type: 'string' }, modes: { type: 'string' }, peers: { type: 'string' },
    steps: { type: 'string' }, warmup: { type: 'string' }, mbps: { type: 'string' }, latency: { type: 'string' },
    batch: { type: 'string' }, seq: { type: 'string' }, accumulate: { type: 'string' }, 'no-overlap': { type: 'boolean' }, 'bucket-floats': { type: 'string' }, cpu: { type: 'boolean' },
    defences: { type: 'boolean' }, micro: { type: 'boolean' }, out: { type: 'string' }, 'diloco-h': { type: 'string' }, 'diloco-rounds': { type: 'string' }, members: { type: 'string' },
  });
  const micro = !!a.micro;
  if (micro) Object.assign(a, { model: a.model ?? 'micro', modes: a.modes ?? 'int8', peers: a.peers ?? '2', steps: a.steps ?? '2', 'diloco-h': a['diloco-h'] ?? '2', 'diloco-rounds': a['diloco-rounds'] ?? '1', batch: a.batch ?? '2', seq: a.seq ?? '16' });
  const preset = presetArg(a.model, 'tiny');
  let scheme;
  try {
    scheme = schemePreset(a.scheme ?? 'fp32');
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const modes = (a.modes ?? 'fp32,int8').split(',').map((s) => s.trim());
  if (!modes.every((m) => m === 'fp32' || m === 'int8')) throw new UsageError(`--modes takes fp32 and/or int8, got '${a.modes}'`);
  const peers = (a.peers ?? '2,3,4').split(',').map((s) => (num('peers', s.trim(), { int: true, min: 1 }) ?? 0));
  if (peers.some((n) => n > 8)) throw new UsageError('--peers: at most 8');
  const mbps = (num('mbps', a.mbps, { min: 0 }) ?? 20);
  if (mbps <= 0) throw new UsageError('--mbps must be > 0');
  const latencyMs = (num('latency', a.latency, { min: 0 }) ?? 20);
  const batch = a.batch === undefined ? undefined : (num('batch', a.batch, { int: true, min: 1 }) ?? 0);
  const seq = a.seq === undefined ? undefined : (num('seq', a.seq, { int: true, min: 1 }) ?? 0);
  const steps = (num('steps', a.steps, { int: true, min: 1 }) ?? 5);
  const warmup = (num('warmup', a.warmup, { int: true, min: 0 }) ?? 1);

  const text = syntheticText(batch ?? 64, seq ?? 512);
  const options = defaultTrainOptions(preset, {
    batch, seq, steps: 1000, evalEvery: 0, scheme,
    model: { vocab_size: CharTokenizer.fromText(text).vocabSize },
  });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  console.error(`adapter: ${JSON.stringify(gpu.adapterInfo)}; ${preset} ${scheme.name}, batch ${options.batch}×${options.seq} per peer, ${mbps} MB/s, ${latencyMs} ms`);
  const link = { bytesPerSecond: mbps * 1e6, latencyMs };
  const rows = await benchDataParallel({
    rt, text, options, peers, modes: modes as GradWire[], steps, warmup, link, accumulate: a.accumulate === undefined ? undefined : (num('accumulate', a.accumulate, { int: true, min: 1 }) ?? 1),
    overlap: !a['no-overlap'],
    bucketFloats: a['bucket-floats'] === undefined ? undefined : (num('bucket-floats', a['bucket-floats'], { int: true, min: 256 }) ?? 0),
  });
  for (const r of rows) {
    console.error(`  ${r.peers} peers ${r.mode}: ${r.msPerStep.toFixed(1)} ms/step (compute ${r.computeMs.toFixed(1)}, comm ${r.commMs.toFixed(1)}, overlapped ${r.overlapMs.toFixed(1)}), ${(r.exchangeBytesSent / 1e6).toFixed(3)} MB sent (${(100 * r.wireRatio).toFixed(1)}% of fp32)`);
  }
  let defences = null;
  if (a.defences) {
    const floats = await paramsOf(rt, options, text);
    const defRows: DefenceRow[] = [];
    for (const p of peers) {
      for (const mode of modes as GradWire[]) {
        const r = await benchDefences({ floats, peers: p, mode, steps, warmup, link, bucketFloats: a['bucket-floats'] === undefined ? undefined : Number(a['bucket-floats']) });
        for (const x of r) console.error(`  ${x.peers} peers ${x.mode} ${x.protocol}: ${x.msPerStep.toFixed(1)} ms/step (exchange ${x.exchangeMs.toFixed(1)}, report ${x.reportMs.toFixed(1)}), ${x.bytesPerStep} B sent per member`);
        defRows.push(...r);
      }
    }
    const H = num('diloco-h', a['diloco-h'], { int: true, min: 1 }) ?? 50;
    const rounds = num('diloco-rounds', a['diloco-rounds'], { int: true, min: 1 }) ?? 2;
    const members = num('members', a.members, { int: true, min: 1 }) ?? peers[0];
    const heldOut: Record<string, unknown>[] = [];
    // On and off alternated (on, off, on, off), each a fresh group from the same start.
    for (const on of [true, false, true, false]) {
      const r = await benchDiloco({ rt, text, options, members, diloco: { innerSteps: H, wire: 'int8', heldOut: on ? undefined : null }, rounds, warmup: 1, link });
      console.error(`  DiLoCo ${members} members H ${H} held-out ${on ? 'on' : 'off'}: ${r.msPerGroupStep.toFixed(1)} ms per group step, held-out ${r.heldOutMsPerRound.toFixed(1)} ms per outer step, ${r.exchangeBytesPerRound} B per outer step`);
      heldOut.push({ heldOut: on, ...r, msPerOuterStep: r.msPerGroupStep * H });
    }
    defences = { dp: defRows, diloco: { members, H, rounds, wire: 'int8', runs: heldOut } };
  }
  const speedup = rows.filter((r) => r.mode === 'int8').map((q) => {
    const f = rows.find((r) => r.mode === 'fp32' && r.peers === q.peers);
    return f ? { peers: q.peers, fp32MsPerStep: f.msPerStep, int8MsPerStep: q.msPerStep, speedup: f.msPerStep / q.msPerStep } : null;
  }).filter(Boolean);
  const json = JSON.stringify({
    command: ['dp_limiter', ...process.argv.slice(2)].join(' '),
    date: new Date().toISOString(),
    adapter: gpu.adapterInfo,
    model: preset, scheme: scheme.name, batch: options.batch, seq: options.seq, params: options.model,
    link, steps, warmup,
    note: 'all peers share one device: msPerStep includes every peer\'s GPU work in turn, and a peer\'s computeMs includes waiting for the others\' work',
    rows, speedup, defences,
  }, null, 2);
  if (a.out) writeFileSync(a.out, json);
  console.log(json);
  rt.destroy();
  process.exit(0);
}

main().catch(fail);
