/**
 * Projected speed-up and fidelity of DiLoCo groups on real text (bench/fidelity-runs.ts; the method
 * is in docs/peer-groups.md): one JSON object on stdout, progress on stderr.
 *
 *   node scripts/run-node.mjs bench/group-fidelity.ts --model small --members 2,4 --diloco 50 --wire int8
 *
 * On the GPU machine (no Node modules there; pack the corpus with the bundle and pass --data):
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/group-fidelity.ts dist-node/group-fidelity.mjs
 * Options: --model P (default small) --data FILES as `npm run train` takes them (default the bundled
 * public/data/tinyshakespeare.txt)
 * --steps S (default 600) --eval-every E lone runs' validation interval (default 50) --eval-batches N
 * (default the recipe's) --members LIST (default 2,4) --diloco H (default 50) --wire fp32|int8|int4
 * (default int8) --streaming F (default 1: off) --overlap τ (streaming: inner steps a fragment's exchange may take, default 1) --outer-lr X --outer-momentum M --mbps MB/s and
 * --latency ms per member uplink (default: no limiter) --batch B --seq T (default the preset's recipe)
 * --time-steps N inner steps timed alone (default 20) --cpu.
 */
import { defaultCorpusPath, fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { DILOCO_ARGS, dilocoArgs } from '../src/cli/diloco-args';
import { buildTokenizer, dataFiles, readData } from '../src/cli/data';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { datasetOf, tokenizeDocuments } from '../src/engine/train/data/datasets';
import { defaultTrainOptions } from '../src/engine/train/options';
import { resolveDiloco } from '../src/parallel/diloco/diloco';
import { runFidelity } from './fidelity-runs';

function members(v: string | undefined): number[] {
  if (v === undefined) return [2, 4];
  const ns = v.split(',').map((x) => Number(x.trim()));
  if (!ns.length || ns.some((n) => !Number.isInteger(n) || n < 2 || n > 8)) throw new UsageError(`--members expects a comma-separated list of group sizes in [2, 8], got '${v}'`);
  return ns;
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const a = parseCliArgs(argv, {
    ...DILOCO_ARGS,
    model: { type: 'string' }, data: { type: 'string' }, steps: { type: 'string' }, 'eval-every': { type: 'string' },
    'eval-batches': { type: 'string' }, members: { type: 'string' }, mbps: { type: 'string' },
    latency: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, 'time-steps': { type: 'string' }, cpu: { type: 'boolean' },
  });
  const preset = presetArg(a.model, 'small');
  const diloco = dilocoArgs(a, 50);
  const resolved = resolveDiloco(diloco);
  const steps = num('steps', a.steps, { int: true, min: 1 }) ?? 600;
  if (steps % resolved.innerSteps !== 0) throw new UsageError(`--steps ${steps} must be a multiple of --diloco ${resolved.innerSteps} (whole outer steps)`);
  const evalEvery = num('eval-every', a['eval-every'], { int: true, min: 1 }) ?? 50;
  const evalBatches = num('eval-batches', a['eval-batches'], { int: true, min: 1 });
  const sizes = members(a.members);
  if (a.latency !== undefined && a.mbps === undefined) throw new UsageError('--latency needs --mbps (the limiter is off without it)');
  const mbps = num('mbps', a.mbps, { min: 0 });
  if (mbps !== undefined && mbps <= 0) throw new UsageError('--mbps must be > 0');
  const link = mbps === undefined ? null : { bytesPerSecond: mbps * 1e6, latencyMs: num('latency', a.latency, { min: 0 }) ?? 0 };
  const timeSteps = num('time-steps', a['time-steps'], { int: true, min: 1 }) ?? 20;
  const data = await readData(a.data === undefined ? [defaultCorpusPath()] : dataFiles(a.data), undefined);
  const tokenizer = buildTokenizer('char', data.documents);
  const corpus = tokenizeDocuments(data.documents, tokenizer, { valFraction: 0.1 });
  const options = defaultTrainOptions(preset, {
    batch: num('batch', a.batch, { int: true, min: 1 }), seq: num('seq', a.seq, { int: true, min: 1 }), steps, evalEvery: 0, evalBatches,
    model: { vocab_size: tokenizer.vocabSize },
  });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  const log = (line: string) => console.error(line);
  log(`adapter: ${JSON.stringify(gpu.adapterInfo)}; ${preset}, batch ${options.batch}×${options.seq}, ${steps} steps, members ${sizes.join(',')}, DiLoCo ${JSON.stringify(resolved)}, link ${link ? JSON.stringify(link) : 'none'}`);
  const result = await runFidelity({
    rt, tokenizer, data: datasetOf(corpus, options.seed), options, members: sizes, diloco: resolved, evalEvery, timeSteps, link, log,
  });
  console.log(JSON.stringify({
    command: ['group_fidelity', ...argv].join(' '),
    date: new Date().toISOString(),
    adapter: gpu.adapterInfo,
    model: preset, batch: options.batch, seq: options.seq, steps, evalEvery, evalBatches: options.evalBatches, seed: options.seed,
    corpus: { files: data.files, tokens: corpus.tokens.length, trainTokens: corpus.trainTokens, vocab: tokenizer.vocabSize },
    diloco: resolved, link,
    note: 'members share one device: the projection uses a member\'s inner step timed alone and the exchange time the last-arriving member was blocked per outer step; see docs/peer-groups.md',
    ...result,
  }, null, 2));
  rt.destroy();
  process.exit(0);
}

main().catch(fail);
