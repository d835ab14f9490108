/**
 * DiLoCo over emulated slow links (src/parallel/diloco/bench.ts), and optionally per-step data parallel
 * on the same device (src/parallel/dp/bench.ts) beside a lone member's step: one JSON object on stdout,
 * progress on stderr.
 *
 *   node scripts/run-node.mjs bench/diloco-limiter.ts --model small --members 4 --diloco 50 --wire int8 --mbps 20 --latency 20
 *
 * On the GPU machine (no Node modules there):
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/diloco-limiter.ts dist-node/diloco-limiter.mjs
 * Options: --model P (default small) --members N (default 4) --diloco H (default 50) --wire
 * fp32|int8|int4 (default int8) --streaming F (default 1: off) --overlap τ (streaming: inner steps a fragment's exchange may take, default 1) --outer-lr X --outer-momentum M
 * --rounds R timed outer steps (default 2) --warmup W (default 1) --mbps MB/s per member uplink
 * (default 20) --latency ms one-way (default 20) --batch B --seq T (default: the preset's recipe)
 * --lone N lone-member steps timed (default 20; 0 skips) --dp-peers 2 also per-step DP with fp32
 * and int8 at --dp-mbps (default 100000: no limit) and 0 ms, B = --batch --dp-steps N (default 5) --cpu
 * --held-out X|off (DiLoCo's held-out check: its largest rise, or off; default the driver's).
 */
import { fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { DILOCO_ARGS, dilocoArgs } from '../src/cli/diloco-args';
import { benchDiloco } from '../src/parallel/diloco/bench';
import { resolveDiloco } from '../src/parallel/diloco/diloco';
import { benchDataParallel } from '../src/parallel/dp/bench';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { syntheticText } from '../src/lab/step';

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    ...DILOCO_ARGS,
    model: { type: 'string' }, members: { type: 'string' },
    rounds: { type: 'string' }, warmup: { type: 'string' }, mbps: { type: 'string' }, latency: { type: 'string' },
    batch: { type: 'string' }, seq: { type: 'string' }, lone: { type: 'string' }, 'dp-peers': { type: 'string' },
    'dp-mbps': { type: 'string' }, 'dp-steps': { type: 'string' }, cpu: { type: 'boolean' }, 'held-out': { type: 'string' },
  });
  const preset = presetArg(a.model, 'small');
  // The held-out check's cost (issue 38): 'off' runs DiLoCo without it, a number sets its largest rise.
  const heldOut = a['held-out'] === undefined ? undefined : a['held-out'] === 'off' ? null : num('held-out', a['held-out'], { min: 0 });
  const diloco = { ...dilocoArgs(a, 50), ...(heldOut !== undefined ? { heldOut } : {}) };
  const members = num('members', a.members, { int: true, min: 1 }) ?? 4;
  if (members > 8) throw new UsageError('--members: at most 8');
  const mbps = num('mbps', a.mbps, { min: 0 }) ?? 20;
  if (mbps <= 0) throw new UsageError('--mbps must be > 0');
  const latencyMs = num('latency', a.latency, { min: 0 }) ?? 20;
  const batch = num('batch', a.batch, { int: true, min: 1 });
  const seq = num('seq', a.seq, { int: true, min: 1 });
  const rounds = num('rounds', a.rounds, { int: true, min: 1 }) ?? 2;
  const warmup = num('warmup', a.warmup, { int: true, min: 0 }) ?? 1;
  const lone = num('lone', a.lone, { int: true, min: 0 }) ?? 20;
  const dpPeers = num('dp-peers', a['dp-peers'], { int: true, min: 1 });
  const dpMbps = num('dp-mbps', a['dp-mbps'], { min: 0 }) ?? 100_000;
  const dpSteps = num('dp-steps', a['dp-steps'], { int: true, min: 1 }) ?? 5;

  const text = syntheticText(batch ?? 64, seq ?? 512);
  const options = defaultTrainOptions(preset, { batch, seq, steps: 100_000, evalEvery: 0, model: { vocab_size: CharTokenizer.fromText(text).vocabSize } });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  const link = { bytesPerSecond: mbps * 1e6, latencyMs };
  console.error(`adapter: ${JSON.stringify(gpu.adapterInfo)}; ${preset}, batch ${options.batch}×${options.seq} per member, ${members} members, ${mbps} MB/s, ${latencyMs} ms, DiLoCo ${JSON.stringify(diloco)}`);
  const result = await benchDiloco({ rt, text, options, members, diloco, rounds, warmup, link, loneSteps: lone });
  console.error(`  DiLoCo: ${result.bytesPerToken.toFixed(2)} B/token vs per-step fp32 DP ${result.fp32DpBytesPerToken.toFixed(1)} (${result.reduction.toFixed(0)}× fewer); waiting ${(100 * result.waitShare).toFixed(1)} % of inner-step time; held-out check ${result.heldOutMsPerRound.toFixed(1)} ms per outer step; ${result.msPerGroupStep.toFixed(1)} ms per group step, lone ${result.loneMsPerStep?.toFixed(1) ?? '-'} ms`);
  let dp = null;
  if (dpPeers) {
    const dpLink = { bytesPerSecond: dpMbps * 1e6, latencyMs: 0 };
    dp = await benchDataParallel({ rt, text, options, peers: [dpPeers], modes: ['fp32', 'int8'], steps: dpSteps, warmup: 1, link: dpLink });
    for (const r of dp) console.error(`  per-step DP ${r.peers} peers ${r.mode}: ${r.msPerStep.toFixed(1)} ms/step (lone ${result.loneMsPerStep?.toFixed(1) ?? '-'} ms)`);
  }
  console.log(JSON.stringify({
    command: ['diloco_limiter', ...process.argv.slice(2)].join(' '),
    date: new Date().toISOString(),
    adapter: gpu.adapterInfo,
    model: preset, batch: options.batch, seq: options.seq, link, diloco: resolveDiloco(diloco), rounds, warmup,
    note: 'members share one device and one JS thread: innerMs includes waiting for the others\' GPU work; waitMs is time blocked on exchanges and reports',
    diloco_result: result,
    dp: dp && { link: { bytesPerSecond: dpMbps * 1e6, latencyMs: 0 }, rows: dp, loneMsPerStep: result.loneMsPerStep },
  }, null, 2));
  rt.destroy();
  process.exit(0);
}

main().catch(fail);
