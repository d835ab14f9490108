/**
 * Host time of a member's INT8 gradient exchange per data-parallel step: the JS path
 * (gradientAccess + encodeInt8Chunk/decodeInt8Chunk) against the GPU one (GradExchange), see
 * src/lab/exchange.ts. Prints one JSON object on stdout, progress on stderr.
 *
 *   node scripts/run-node.mjs bench/exchange.ts --model small --members 2,4 --batch 1 --seq 16
 *
 * On the GPU machine, bundle it like the bench CLI (bench/README.md):
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/exchange.ts dist-node/exchange.mjs
 * Options: --model P (default small) --scheme S (default agoq: the stored INT8 blocks; fp32 for
 * the flat gradient) --members 2,3,4 (default 2,4) --paths js,gpu,gpu-2shot --steps N (default 10)
 * --warmup N (default 2) --batch B --seq T (default: the preset's recipe; the batch only sets the
 * gradient's values, not the exchange's size) --cpu.
 */
import { fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { schemePreset } from '../src/engine/scheme/presets';
import { benchExchange, EXCHANGE_PATHS, type ExchangePath } from '../src/lab/exchange';

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    model: { type: 'string' }, scheme: { type: 'string' }, members: { type: 'string' }, paths: { type: 'string' },
    steps: { type: 'string' }, warmup: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, cpu: { type: 'boolean' },
  });
  const preset = presetArg(a.model, 'small');
  let scheme;
  try {
    scheme = schemePreset(a.scheme ?? 'agoq');
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const members = (a.members ?? '2,4').split(',').map((s) => num('members', s.trim(), { int: true, min: 2 }) ?? 2);
  const paths = (a.paths ?? EXCHANGE_PATHS.join(',')).split(',').map((s) => s.trim()) as ExchangePath[];
  if (!paths.every((p) => EXCHANGE_PATHS.includes(p))) throw new UsageError(`--paths takes ${EXCHANGE_PATHS.join(', ')}`);
  const steps = num('steps', a.steps, { int: true, min: 1 }) ?? 10;
  const warmup = num('warmup', a.warmup, { int: true, min: 0 }) ?? 2;
  const batch = num('batch', a.batch, { int: true, min: 1 });
  const seq = num('seq', a.seq, { int: true, min: 1 });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  console.error(`adapter: ${JSON.stringify(gpu.adapterInfo)}; ${preset} ${scheme.name}, members ${members.join(',')}`);
  const rows = await benchExchange(rt, { preset, scheme, members, batch, seq, steps, warmup, paths }, (s) => console.error(s));
  console.log(JSON.stringify({
    command: ['exchange', ...process.argv.slice(2)].join(' '),
    date: new Date().toISOString(),
    adapter: gpu.adapterInfo,
    model: preset, scheme: scheme.name, steps, warmup,
    note: 'per member and step, medians; host = event-loop active ms (JS busy), wall = exchange start to GPU done, gc = GC pauses; no network, no backward',
    rows,
  }, null, 2));
  rt.destroy();
  process.exit(0);
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then(() => clearInterval(keepAlive), fail);
