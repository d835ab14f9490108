/**
 * npm run train -- [options]: trains on WebGPU in Node (Dawn; SwiftShader when no GPU) with the same
 * engine as the browser. Writes run.json, metrics.jsonl and a Hugging Face checkpoint to --out.
 */
import { mkdirSync, readFileSync, writeFileSync, appendFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import cliProgress from 'cli-progress';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { modelConfigFromHf, saveCheckpoint } from '../engine/io/checkpoint';
import { writeNpy } from '../engine/io/npy';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { initParams, paramLayout, unflatten } from '../engine/model/params';
import { defaultTrainOptions, type TrainOverrides } from '../engine/train/options';
import { datasetOf, valBitsPerByte } from '../engine/train/datasets';
import { tokenizerFromJSON } from '../engine/train/hf-tokenizer';
import { bitsAndWire } from '../engine/train/probe-bits';
import { planMemory, resolveBudgetOptions, Trainer } from '../engine/train/trainer';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { assertSupported, parseScheme, type Scheme } from '../engine/scheme/scheme';
import { defaultCorpusPath, fail, num, UsageError } from './common';
import { buildTokenizer, cachedCorpus, dataFiles, readData, readInit } from './data';

const HELP = `usage: npm run train -- [options]
  --model micro|tiny|small|base   preset (default micro)
  --config FILE.json              model config (HF config.json keys) overriding the preset
  --steps N --batch B --seq T     training length, batch size, context
  --lr X --min-lr X --warmup N    learning rate schedule (linear warmup, cosine to min-lr)
  --weight-decay X --grad-clip X  AdamW decay (ndim>=2 only), global-norm clipping (0 = off)
  --seed S                        seed for init and batches
  --scheme NAME|FILE.json         quantization scheme: fp32 (default), agoq, taco, taco-tp2, tp4-fp32, the study's
                                  w8 w4 a8 a4 g8 g4 w8a8g8 m8 m4 v8 v4, or a JSON file (docs/schemes.md)
  --data PATH[,PATH...]           training text: .txt, .jsonl/.json, .parquet files or folders of them
                                  (default: bundled TinyShakespeare); pre-tokenized once into .cache/tokens
  --text-field NAME               the text field of .jsonl/.json objects and .parquet rows (default text)
  --tokenizer char|bpe:N|FILE.json  characters of the data (default), byte-level BPE of N tokens trained on
                                  the data (written to DIR/tokenizer.json), or an existing tokenizer.json
  --init DIR                      start from a Hugging Face Llama checkpoint or a lab checkpoint (its
                                  config, weights and tokenizer; a --tokenizer given replaces the latter)
  --eval-every N --eval-batches N validation cadence and size
  --out DIR                       output directory (default runs/<model>-<time>)
  --export-init                   write DIR/init/model.safetensors + config.json before step 0
  --dump-batches                  write DIR/batches.npy (int32 [steps, batch, seq+1])
  --sample N                      print N sampled tokens at the end
  --plan                          print the memory plan (bytes per category) as JSON and exit
  --cpu                           force the SwiftShader CPU adapter`;

async function main(): Promise<void> {
  let a;
  try {
    a = parseArgs({
      options: {
        model: { type: 'string' }, config: { type: 'string' }, steps: { type: 'string' }, batch: { type: 'string' },
        seq: { type: 'string' }, lr: { type: 'string' }, 'min-lr': { type: 'string' }, warmup: { type: 'string' },
        'weight-decay': { type: 'string' }, 'grad-clip': { type: 'string' }, seed: { type: 'string' },
        data: { type: 'string' }, out: { type: 'string' }, 'eval-every': { type: 'string' }, 'eval-batches': { type: 'string' },
        'export-init': { type: 'boolean' }, 'dump-batches': { type: 'boolean' }, plan: { type: 'boolean' },
        sample: { type: 'string' }, cpu: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
        scheme: { type: 'string' }, tokenizer: { type: 'string' }, init: { type: 'string' }, 'text-field': { type: 'string' },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n${HELP}`);
  }
  if (a.help) {
    console.log(HELP);
    return;
  }
  const preset = (a.model ?? 'micro') as PresetName;
  if (!PRESET_NAMES.includes(preset)) throw new UsageError(`--model must be one of ${PRESET_NAMES.join(', ')}, got '${a.model}'`);
  let modelOverride = {};
  if (a.config) {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(a.config, 'utf8'));
    } catch (e) {
      throw new UsageError(`--config ${a.config}: ${(e as Error).message}`);
    }
    modelOverride = modelConfigFromHf(raw as Record<string, unknown>);
  }
  const scheme = loadScheme(a.scheme ?? 'fp32');
  const data = await readData(dataFiles(a.data ?? defaultCorpusPath()), a['text-field']);
  const init = a.init ? readInit(a.init) : undefined;
  let shown = -1;
  const bpeProgress = (done: number, total: number) => {
    const tenth = Math.floor((10 * done) / Math.max(total, 1));
    if (tenth > shown) console.error(`BPE tokenizer: ${done}/${total} tokens`);
    shown = tenth;
  };
  const tokenizer = a.tokenizer || !init?.extra?.tokenizer
    ? buildTokenizer(a.tokenizer ?? 'char', data.documents, bpeProgress)
    : tokenizerFromJSON(init.extra.tokenizer, init.extra.tokenizerConfig);
  if (init && tokenizer.vocabSize > init.config.vocab_size) {
    throw new UsageError(`--init ${a.init}: the tokenizer has ${tokenizer.vocabSize} tokens, the model's embedding ${init.config.vocab_size}`);
  }
  const o: TrainOverrides = {
    steps: num('steps', a.steps, { int: true, min: 1 }), batch: num('batch', a.batch, { int: true, min: 1 }),
    seq: num('seq', a.seq, { int: true, min: 1 }), lr: num('lr', a.lr, { min: 0 }), minLr: num('min-lr', a['min-lr'], { min: 0 }),
    warmup: num('warmup', a.warmup, { int: true, min: 0 }), weightDecay: num('weight-decay', a['weight-decay'], { min: 0 }),
    gradClip: num('grad-clip', a['grad-clip'], { min: 0 }), seed: num('seed', a.seed, { int: true, min: 0 }),
    evalEvery: num('eval-every', a['eval-every'], { int: true, min: 0 }), evalBatches: num('eval-batches', a['eval-batches'], { int: true, min: 1 }),
    model: { ...modelOverride, ...init?.config, vocab_size: init?.config.vocab_size ?? tokenizer.vocabSize },
    scheme,
  };
  let opts;
  try {
    opts = defaultTrainOptions(preset, o);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const sampleChars = num('sample', a.sample, { int: true, min: 0 }) ?? 0;

  if (a.plan) {
    const layout = paramLayout(opts.model);
    const { opts: resolved, choice } = resolveBudgetOptions(opts);
    console.log(JSON.stringify({
      model: preset, scheme: scheme.name, params: layout.count, vocab_size: opts.model.vocab_size, tokenizer: tokenizer.kind, batch: opts.batch, seq: opts.seq, bytes: planMemory(opts),
      ...(choice ? { budget: choice.budget, bits: choice.bits } : {}),
      bits_and_wire: bitsAndWire(resolved.model, resolved.batch, resolved.seq, resolved.scheme),
    }, null, 2));
    return;
  }

  const out = a.out ?? path.join('runs', `${preset}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(out, { recursive: true });
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  const steps = opts.optimizer.total_steps;
  const { corpus, cached } = cachedCorpus(data, tokenizer, { field: a['text-field'], cacheDir: path.join('.cache', 'tokens') });
  if (tokenizer.kind !== 'char') writeFileSync(path.join(out, 'tokenizer.json'), JSON.stringify(tokenizer.hfJSON()) + '\n');
  const trainer = await Trainer.create(rt, opts, '', { tokenizer, data: datasetOf(corpus, opts.seed), params: init?.params });
  if (trainer.budgetChoice) {
    console.error(`memory budget ${trainer.budgetChoice.budget} B: bits per layer and kind ${JSON.stringify(trainer.budgetChoice.bits)}`);
  }
  // Every resolved setting, as the trainer runs it (a memory budget already turned into per-layer bits).
  const runInfo = {
    model: opts.model,
    optimizer: opts.optimizer,
    batch: opts.batch,
    seq: opts.seq,
    seed: opts.seed,
    eval: { every: opts.evalEvery, batches: opts.evalBatches },
    data: {
      files: data.files, text_field: a['text-field'] ?? 'text', documents: corpus.documents, tokens: corpus.tokens.length,
      train_tokens: corpus.trainTokens, bytes: corpus.bytes, cached,
    },
    tokenizer: tokenizer.kind === 'char' ? tokenizer.toJSON() : { kind: tokenizer.kind, vocab_size: tokenizer.vocabSize, eos_id: tokenizer.eosId, file: 'tokenizer.json' },
    ...(a.init ? { init: path.resolve(a.init) } : {}),
    scheme: trainer.opts.scheme ?? scheme,
    // Exact bits per element and wire bytes of this scheme and model (not measured).
    bits_and_wire: bitsAndWire(trainer.opts.model, trainer.opts.batch, trainer.opts.seq, trainer.opts.scheme),
    device: gpu.adapterInfo,
    params: paramLayout(opts.model).count,
    started: new Date().toISOString(),
  };
  writeFileSync(path.join(out, 'run.json'), JSON.stringify(runInfo, null, 2) + '\n');

  if (a['export-init']) {
    const layout = paramLayout(opts.model);
    const files = saveCheckpoint({ config: opts.model, params: unflatten(initParams(opts.model, layout, opts.seed), layout) });
    mkdirSync(path.join(out, 'init'), { recursive: true });
    writeFileSync(path.join(out, 'init', 'model.safetensors'), files['model.safetensors']);
    writeFileSync(path.join(out, 'init', 'config.json'), files['config.json']);
  }

  if (a['dump-batches']) {
    const per = opts.batch * (opts.seq + 1);
    const all = new Int32Array(steps * per);
    for (let s = 0; s < steps; s++) all.set(trainer.batchAt(s), s * per);
    writeFileSync(path.join(out, 'batches.npy'), writeNpy(all, [steps, opts.batch, opts.seq + 1]));
  }

  const metricsPath = path.join(out, 'metrics.jsonl');
  writeFileSync(metricsPath, '');
  const tty = process.stderr.isTTY;
  const bar = tty
    ? new cliProgress.SingleBar({ format: 'train |{bar}| {value}/{total} loss {loss} val {val} {tps} tok/s', hideCursor: true }, cliProgress.Presets.shades_classic)
    : null;
  bar?.start(steps, 0, { loss: '-', val: '-', tps: '-' });
  let lastVal = NaN;
  const logVal = async (step: number) => {
    lastVal = await trainer.evaluate();
    appendFileSync(metricsPath, JSON.stringify({ step, val_loss: lastVal, val_bpb: valBitsPerByte(corpus, lastVal) }) + '\n');
    // Per-layer ‖x − x̂‖/‖x‖ of what the scheme quantizes in the forward pass (none under fp32 or TACO).
    const quantError = await trainer.quantErrors();
    if (quantError.length) appendFileSync(metricsPath, JSON.stringify({ step, quant_error: quantError }) + '\n');
    if (!tty) console.error(`step ${step}: val_loss ${lastVal.toFixed(4)}`);
  };
  for (let s = 0; s < steps; s++) {
    const evalHere = opts.evalEvery > 0 && (s + 1) % opts.evalEvery === 0 && s + 1 < steps;
    // The next step is submitted before this one's loss is read, unless something else comes first.
    const m = await trainer.trainStep({ next: !evalHere && s + 1 < steps });
    appendFileSync(metricsPath, JSON.stringify(m) + '\n');
    bar?.update(s + 1, { loss: m.loss.toFixed(4), val: Number.isNaN(lastVal) ? '-' : lastVal.toFixed(4), tps: Math.round(m.tokens_per_s) });
    if (!tty && (s % 10 === 0 || s === steps - 1)) {
      console.error(`step ${s}: loss ${m.loss.toFixed(4)} lr ${m.lr.toExponential(2)} grad_norm ${m.grad_norm.toFixed(3)} ${Math.round(m.tokens_per_s)} tok/s`);
    }
    if (evalHere) await logVal(s + 1);
  }
  await logVal(steps);
  bar?.stop();
  const files = await trainer.checkpoint();
  for (const [name, content] of Object.entries(files)) if (content !== undefined) writeFileSync(path.join(out, name), content);
  if (sampleChars > 0) console.log(await trainer.sample('\n', sampleChars, 0.8, opts.seed));
  const summary = { out, steps, final_val_loss: lastVal, mem: trainer.memory() };
  console.log(JSON.stringify(summary));
  trainer.destroy();
  rt.destroy();
}

function loadScheme(arg: string): Scheme {
  if (SCHEME_PRESETS[arg]) return SCHEME_PRESETS[arg];
  if (!arg.endsWith('.json')) throw new UsageError(`--scheme: unknown preset '${arg}' (presets: ${Object.keys(SCHEME_PRESETS).join(', ')}; or a .json file)`);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(arg, 'utf8'));
  } catch (e) {
    throw new UsageError(`--scheme ${arg}: ${(e as Error).message}`);
  }
  try {
    const s = parseScheme(raw);
    // A memory budget is resolved into per-layer bits by the trainer; everything else must be executable.
    assertSupported({ ...s, budget_bytes: undefined });
    return s;
  } catch (e) {
    throw new UsageError(`--scheme ${arg}: ${(e as Error).message}`);
  }
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then(() => {
  clearInterval(keepAlive);
  process.exit(0);
}, fail);
