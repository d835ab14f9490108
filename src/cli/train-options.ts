/**
 * `npm run train`'s command line: every flag, file and resumed run checked before the GPU starts and
 * before anything is written, each problem one UsageError naming the option and what it expects.
 */
import path from 'node:path';
import { type Checkpoint, loadCheckpoint, modelConfigFromHf, type OptimizerState } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';
import { importPeftAdapter, type PeftAdapter } from '../engine/lora/peft';
import { defaultLoraSpec, type LoraSpec, type LoraTarget, parseLoraTargets } from '../engine/lora/spec';
import { defaultQloraSpec, QLORA_FORMATS, type QloraFormat, type QloraSpec } from '../engine/lora/qlora/plan';
import { hfConfigJson, type ModelConfig, PRESETS, PRESET_NAMES, type PresetName } from '../engine/model/config';
import { modelDims } from '../engine/model/plan';
import { paramLayout } from '../engine/model/params';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { assertSupported, parseScheme, type Scheme } from '../engine/scheme/scheme';
import { tpProblem } from '../engine/model/tp/tp';
import { datasetOf, type TokenCorpus } from '../engine/train/data/datasets';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import { type TrainOptions, validateTrainOptions } from '../engine/train/options';
import {
  BUNDLED_DATASET, type CadenceSpec, DEFAULT_CHECKPOINT_EVERY, DEFAULT_SAMPLE_TEMPERATURE, defaultRunSpec, modelConfigKeyProblems, type RunSpec,
  trainOptionsOf, validateRunSpec,
} from '../engine/run/spec';
import type { Tokenizer } from '../engine/train/tokenizer/tokenizer';
import type { LossScaleCheckpoint } from '../engine/train/trainer';
import { resolveTrainingPlan, type TrainingPlan } from '../engine/plan/train-plan';
import { CheckpointError, checkOutDir, readLatestCheckpoint } from './checkpoint-store';
import { defaultCorpusPath, num, parseCliArgs, readJsonObject, UsageError } from './common';
import { buildTokenizer, cachedCorpus, dataFiles, type LoadedData, readData, readFolderFiles, readInit } from './data';
import { fetchHubInit } from './hub-cache';
import { runDiskBytes } from './run-dir';
import { schemeKeyProblems } from './scheme-keys';

export { DEFAULT_CHECKPOINT_EVERY };

export const TRAIN_HELP = `usage: npm run train -- [options]
  --model micro|tiny|small|base   preset (default micro)
  --config FILE.json              model config (HF config.json keys) overriding the preset's
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
  --init DIR|hf:ID[@REV]          start from a Hugging Face Llama checkpoint or a lab checkpoint (its
                                  config, weights and tokenizer; a --tokenizer given replaces the latter);
                                  hf:ID downloads a Hub model (e.g. hf:HuggingFaceTB/SmolLM2-135M) into the
                                  cache first (HF_TOKEN for gated models, HF_ENDPOINT for a mirror)
  --lora R                        fine-tune LoRA adapters of rank R over the frozen model (PEFT's conventions;
                                  DIR/adapter_config.json + adapter_model.safetensors load with PeftModel)
  --lora-alpha A                  the adapters' alpha (scale alpha/R; default 2R)
  --lora-dropout P                dropout on the adapters' input (default 0)
  --lora-targets LIST             the linear layers that get adapters: q,k,v,o,gate,up,down (default all)
  --adapter DIR                   continue the PEFT LoRA adapter in DIR (its rank, alpha, targets) over --init's model
  --merge                         also write DIR/merged: the model with the adapters merged in (a full HF checkpoint)
  --qlora int4|nf4|int8           QLoRA: the frozen base's block linears stored on the GPU only as INT4, NF4
                                  (QLoRA's NormalFloat) or INT8 codes (an fp32 scale per 64 inputs), no fp32 copy;
                                  needs --lora R or --adapter DIR;
                                  fp32 compute, or f16 with --scheme f16 (each linear dequantized to f16 before its GEMM)
  --checkpoint-activations        keep only each layer's input for the backward and recompute the layer's
                                  forward there (less activation memory, about one more forward per step;
                                  the same losses and gradients); fp32 or f16 compute, fp32 saved cells
  --eval-every N --eval-batches N validation cadence and size
  --out DIR                       output directory (default runs/<model>-<time>); must be new or empty
  --overwrite                     replace the run files in a non-empty --out
  --resume DIR                    continue the run in DIR from its last checkpoint, bit for bit (its
                                  options come from DIR/run.json; flags that differ are refused)
  --checkpoint-every N            commit DIR/checkpoints every N steps (default ${DEFAULT_CHECKPOINT_EVERY}; 0 = only at the
                                  end and on Ctrl-C / SIGTERM)
  --export-init                   write DIR/init/model.safetensors + config.json before step 0
  --dump-batches                  write DIR/batches.npy (int32 [steps, batch, seq+1])
  --sample N                      print N tokens generated at the end (KV-cache decoder; stops early at
                                  the context length --seq)
  --sample-prompt TEXT            the prompt they continue (default a newline)
  --plan                          check everything, print the memory plan (bytes per category) as JSON and exit
  --cpu                           force the SwiftShader CPU adapter
  --tune                          first tune the kernel choices this run makes that the tuning cache lacks
                                  on this GPU (npm run tune; every run uses what the cache holds)
  --tune-budget-s N               seconds for the whole tune, its step check included (default 90)
exit status: 0 done, 2 bad input (one 'error:' line, nothing written), 1 a failure during the run,
130 interrupted (the last completed step is checkpointed: continue with --resume DIR)`;

const OPTIONS = {
  model: { type: 'string' }, config: { type: 'string' }, steps: { type: 'string' }, batch: { type: 'string' },
  seq: { type: 'string' }, lr: { type: 'string' }, 'min-lr': { type: 'string' }, warmup: { type: 'string' },
  'weight-decay': { type: 'string' }, 'grad-clip': { type: 'string' }, seed: { type: 'string' },
  data: { type: 'string' }, out: { type: 'string' }, 'eval-every': { type: 'string' }, 'eval-batches': { type: 'string' },
  'export-init': { type: 'boolean' }, 'dump-batches': { type: 'boolean' }, plan: { type: 'boolean' },
  sample: { type: 'string' }, 'sample-prompt': { type: 'string' }, cpu: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
  scheme: { type: 'string' }, resume: { type: 'string' }, overwrite: { type: 'boolean' }, 'checkpoint-every': { type: 'string' },
  tokenizer: { type: 'string' }, init: { type: 'string' }, 'text-field': { type: 'string' },
  tune: { type: 'boolean' }, 'tune-budget-s': { type: 'string' },
  lora: { type: 'string' }, 'lora-alpha': { type: 'string' }, 'lora-dropout': { type: 'string' }, 'lora-targets': { type: 'string' },
  adapter: { type: 'string' }, merge: { type: 'boolean' }, qlora: { type: 'string' }, 'checkpoint-activations': { type: 'boolean' },
} as const;

/** The checkpoint a resumed run starts from. */
export interface ResumePoint {
  step: number;
  params: Map<string, Float32Array>;
  /** A LoRA run's adapters as of the checkpoint. */
  adapters?: Map<string, Float32Array>;
  optimizer: OptimizerState & { lossScale?: LossScaleCheckpoint };
  /** The checkpoint's files as committed (a finished run's export is written again from them). */
  files: Record<string, Uint8Array>;
}

export interface TrainPlan {
  preset: PresetName;
  /** The run spec (engine/run/spec.ts): the one source of the options and of the cadence (eval, sample, checkpoint). */
  spec: RunSpec;
  /** trainOptionsOf(spec). */
  opts: TrainOptions;
  scheme: Scheme;
  /** The data files as read, and their token corpus (train, then validation). */
  data: LoadedData;
  textField: string | undefined;
  corpus: TokenCorpus;
  /** The corpus came from the disk cache. */
  cached: boolean;
  tokenizer: Tokenizer;
  /** --init DIR: the directory and its weights (full tensors). */
  init: { dir: string; params: Map<string, Float32Array> } | null;
  /** LoRA adapters to start from (--adapter DIR, or --init's own with --lora); null: PEFT's init. */
  adapters: Map<string, Float32Array> | null;
  /** --merge: write the merged model beside the adapters at the end. */
  merge: boolean;
  out: string;
  plan: boolean;
  cpu: boolean;
  exportInit: boolean;
  dumpBatches: boolean;
  overwrite: boolean;
  /** Set for --resume: null when the run committed no checkpoint yet (it starts again from step 0). */
  resume: { point: ResumePoint | null } | null;
  /** The options resolved once (the memory budget solved), for --plan and the trainer; null: resolve them (a resumed run). */
  resolved: TrainingPlan | null;
  /** --tune: tune what the cache lacks before the model is built, within budgetS seconds (cli/tune-cache.ts). */
  tune: { budgetS: number; preset?: PresetName } | null;
}

type Flags = ReturnType<typeof parseCliArgs<typeof OPTIONS>>;

/** The checked plan of a `train` command line; null for --help. */
export async function parseTrainArgs(argv: string[]): Promise<TrainPlan | null> {
  const a = parseCliArgs(argv, OPTIONS);
  if (a.help) return null;
  const sampleChars = num('sample', a.sample, { int: true, min: 0 }) ?? 0;
  if (a['sample-prompt'] !== undefined && !sampleChars) throw new UsageError('--sample-prompt needs --sample N (how many tokens to generate)');
  const everyFlag = num('checkpoint-every', a['checkpoint-every'], { int: true, min: 0 });
  // What this command line asks of the cadence, new run or resumed: a sample at the end, the checkpoints' period.
  const cadence: Partial<CadenceSpec> = {
    sampleLength: sampleChars, ...(a['sample-prompt'] !== undefined ? { samplePrompt: a['sample-prompt'] } : {}), ...(everyFlag !== undefined ? { checkpointEvery: everyFlag } : {}),
  };
  const tuneBudget = num('tune-budget-s', a['tune-budget-s'], { min: 1 });
  if (tuneBudget !== undefined && !a.tune) throw new UsageError('--tune-budget-s goes with --tune');
  const common = {
    cpu: a.cpu ?? false, exportInit: a['export-init'] ?? false, dumpBatches: a['dump-batches'] ?? false, plan: a.plan ?? false,
    // The tune's step check times the preset's synthetic run (lab/tune-check.ts: skipped where the model is not its shape).
    tune: a.tune ? { budgetS: tuneBudget ?? 90, ...(a.config === undefined && PRESET_NAMES.includes(a.model as PresetName) ? { preset: a.model as PresetName } : {}) } : null, merge: a.merge ?? false,
  };
  if (a.resume !== undefined) {
    const r = await resumePlan(a, a.resume, cadence);
    if (common.merge && !r.opts.lora) throw new UsageError(`--merge goes with a LoRA run; the run in ${a.resume} trains every parameter`);
    return { ...common, ...r };
  }
  if (common.merge && a.lora === undefined && a.adapter === undefined) throw new UsageError('--merge goes with --lora R or --adapter DIR (it writes the model with the adapters merged in)');
  if (a.overwrite && a.out === undefined) throw new UsageError('--overwrite needs --out DIR (the directory to replace)');

  const preset = (a.model ?? 'micro') as PresetName;
  if (!PRESET_NAMES.includes(preset)) throw new UsageError(`--model expects one of ${PRESET_NAMES.join(', ')}, got '${a.model}'`);
  const data = await loadData(a.data ?? defaultCorpusPath(), a['text-field']);
  // hf:ID[@REV] is downloaded into the user's cache (cli/hub-cache.ts) and read from there like a directory.
  const initDir = a.init?.startsWith('hf:') ? await fetchHubInit(a.init.slice(3)) : a.init;
  const init = initDir ? readInit(initDir, a.init === initDir ? '--init' : `--init ${a.init}, downloaded to`) : undefined;
  const lora = loraFlags(a, init);
  const qlora = qloraFlag(a.qlora, !!lora);
  if (init?.adapters && !lora) {
    // A LoRA run's export trains on as the model it is: its adapters merged into the base.
    console.error(`--init ${a.init}: merging its LoRA adapters (rank ${init.adapters.spec.rank}) into the model; pass --lora R to train them as adapters instead`);
    init.params = mergeLora(init.config, init.adapters.spec, init.params, init.adapters.tensors);
  }
  const tokenizer = a.tokenizer || !init?.extra?.tokenizer
    ? buildTokenizer(a.tokenizer ?? 'char', data.documents, bpeProgress())
    : tokenizerFromJSON(init.extra.tokenizer, init.extra.tokenizerConfig);
  if (init && tokenizer.vocabSize > init.config.vocab_size) {
    throw new UsageError(`--init ${a.init}: the tokenizer has ${tokenizer.vocabSize} tokens, the model's embedding ${init.config.vocab_size}`);
  }
  const overrides = {
    steps: num('steps', a.steps, { int: true, min: 1 }), batch: num('batch', a.batch, { int: true, min: 1 }),
    seq: num('seq', a.seq, { int: true, min: 1 }), lr: num('lr', a.lr, { min: 0 }), minLr: num('min-lr', a['min-lr'], { min: 0 }),
    warmup: num('warmup', a.warmup, { int: true, min: 0 }), weightDecay: num('weight-decay', a['weight-decay'], { min: 0 }),
    gradClip: num('grad-clip', a['grad-clip'], { min: 0 }), seed: num('seed', a.seed, { int: true, min: 0 }),
  };
  cadence.evalEvery = num('eval-every', a['eval-every'], { int: true, min: 0 });
  cadence.evalBatches = num('eval-batches', a['eval-batches'], { int: true, min: 1 });
  const seq = overrides.seq ?? defaultRunSpec(preset).seq;
  const model = { ...(a.config ? configOverride(a.config, preset, seq) : {}), ...init?.config, vocab_size: init?.config.vocab_size ?? tokenizer.vocabSize };
  const schemeArg = a.scheme ?? 'fp32';
  const scheme = loadScheme(schemeArg, model.num_hidden_layers ?? PRESETS[preset].num_hidden_layers);
  let spec: RunSpec;
  try {
    spec = defaultRunSpec(preset, {
      ...overrides, model, scheme, cadence,
      data: { source: a.data ?? BUNDLED_DATASET, ...(a['text-field'] ? { textField: a['text-field'] } : {}) },
      tokenizer: { kind: tokenizer.kind, source: a.tokenizer ?? (init?.extra?.tokenizer ? `--init ${a.init}` : 'char'), vocabSize: tokenizer.vocabSize },
      ...(lora ? { lora: lora.spec } : {}),
      ...(qlora ? { qlora } : {}),
      ...(a['checkpoint-activations'] ? { checkpointActivations: true } : {}),
    });
  } catch (e) {
    throw new UsageError(namingFlags((e as Error).message));
  }
  const opts = trainOptionsOf(spec);
  const out = a.out ?? path.join('runs', `${preset}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  if (!common.plan) outDirCheck(out, opts, { overwrite: a.overwrite });
  const { corpus, cached } = cachedCorpus(data, tokenizer, { field: a['text-field'], cacheDir: path.join('.cache', 'tokens') });
  const resolved = checkFeasible(opts, schemeArg, corpus, a.data ?? 'the bundled corpus');
  return {
    ...common, preset, opts, scheme, data, textField: a['text-field'], corpus, cached, tokenizer,
    init: init && initDir ? { dir: path.resolve(initDir), params: init.params } : null, out, overwrite: a.overwrite ?? false,
    adapters: lora?.tensors ?? null, spec, resume: null, resolved,
  };
}

/**
 * The LoRA settings of a command line: --lora R with its alpha, dropout and targets, or the PEFT
 * adapter of --adapter DIR (or of --init's directory) to continue; null: every parameter trains.
 */
function loraFlags(a: Flags, init: Checkpoint | undefined): { spec: LoraSpec; tensors: Map<string, Float32Array> | null } | null {
  const rank = num('lora', a.lora, { int: true, min: 1 });
  const alpha = num('lora-alpha', a['lora-alpha'], { min: 0 });
  const dropout = num('lora-dropout', a['lora-dropout'], { min: 0 });
  const named = (['lora-alpha', 'lora-dropout', 'lora-targets'] as const).filter((f) => a[f] !== undefined);
  if (a.adapter !== undefined) {
    if (!init) throw new UsageError('--adapter DIR needs --init DIR|hf:ID: the model the adapter was trained on');
    if (rank !== undefined || named.length) throw new UsageError(`--adapter ${a.adapter} brings its own rank, alpha, dropout and targets; drop ${rank !== undefined ? '--lora' : `--${named[0]}`}`);
    const got = readAdapter(a.adapter, init.config);
    return { spec: got.spec, tensors: got.tensors };
  }
  if (rank === undefined) {
    if (named.length) throw new UsageError(`--${named[0]} goes with --lora R (the adapters' rank)`);
    return null;
  }
  let targets: LoraTarget[] | undefined;
  try {
    targets = a['lora-targets'] !== undefined ? parseLoraTargets(a['lora-targets']) : undefined;
  } catch (e) {
    throw new UsageError(`--lora-targets: ${(e as Error).message}`);
  }
  if (dropout !== undefined && dropout >= 1) throw new UsageError(`--lora-dropout expects a probability below 1, got ${dropout}`);
  if (alpha === 0) throw new UsageError('--lora-alpha expects a positive number, got 0');
  const spec = defaultLoraSpec(rank, { alpha, dropout, targets });
  // --init's own adapters (a LoRA run's export) continue when their settings are these.
  const own = init?.adapters;
  if (own) {
    if (canonical(own.spec) !== canonical(spec)) throw new UsageError(`--init's adapter is rank ${own.spec.rank}, alpha ${own.spec.alpha}, targets ${own.spec.targets.join(',')}: pass the same --lora settings to continue it, or drop --lora to train the merged model`);
    return { spec, tensors: own.tensors };
  }
  return { spec, tensors: null };
}

/** --qlora int4|nf4|int8: the frozen base's storage (QLoRA's block size, 64 inputs per scale); undefined without the flag. */
function qloraFlag(v: string | undefined, lora: boolean): QloraSpec | undefined {
  if (v === undefined) return undefined;
  if (!(QLORA_FORMATS as readonly string[]).includes(v)) throw new UsageError(`--qlora expects one of ${QLORA_FORMATS.join(', ')} (the frozen base's storage), got '${v}'`);
  if (!lora) throw new UsageError('--qlora goes with --lora R or --adapter DIR (it quantizes the frozen base under the adapters)');
  return defaultQloraSpec(v as QloraFormat);
}

function readAdapter(dir: string, config: ModelConfig): PeftAdapter {
  // .bin too: importPeftAdapter names a pickle-only adapter rather than reporting it missing.
  const files = readFolderFiles(dir, '--adapter', (n) => /\.(json|safetensors|bin)$/.test(n));
  let got: PeftAdapter;
  try {
    got = importPeftAdapter(config, files);
  } catch (e) {
    throw new UsageError(`--adapter ${dir}: ${(e as Error).message}`);
  }
  if (got.ignoredKeys.length) console.error(`--adapter ${dir}: ignoring adapter_config.json keys this lab does not know: ${got.ignoredKeys.join(', ')}`);
  return got;
}

/** Option paths of the training options' validation messages, as the flags that set them. */
const FLAG_OF: Record<string, string> = {
  'optimizer.lr': '--lr', 'optimizer.min_lr': '--min-lr', 'optimizer.warmup_steps': '--warmup', 'optimizer.total_steps': '--steps',
  'optimizer.weight_decay': '--weight-decay', 'optimizer.grad_clip': '--grad-clip', batch: '--batch', seq: '--seq', seed: '--seed',
  evalEvery: '--eval-every', evalBatches: '--eval-batches', min_lr: '--min-lr', 'seq ': '--seq ',
  'cadence.evalEvery': '--eval-every', 'cadence.evalBatches': '--eval-batches', 'cadence.checkpointEvery': '--checkpoint-every',
  'cadence.sampleLength': '--sample', 'tokenizer.vocabSize': '--tokenizer',
};

function namingFlags(msg: string): string {
  let out = msg.replace(/^invalid (training options|run spec):\s*/, '');
  for (const [k, flag] of Object.entries(FLAG_OF)) out = out.replace(new RegExp(`(^|\\s)${k.replace('.', '\\.')}(:| )`, 'g'), `$1${flag.trim()} (${k.trim()})$2`);
  return `the training options are invalid: ${out}`;
}

async function loadData(arg: string, field: string | undefined): Promise<LoadedData> {
  const data = await readData(dataFiles(arg), field);
  if (!data.documents.some((d) => d.length > 0)) throw new UsageError(`--data ${arg} is empty; expected a training text`);
  return data;
}

/** BPE training's progress on stderr, in tenths. */
function bpeProgress(): (done: number, total: number) => void {
  let shown = -1;
  return (done, total) => {
    const tenth = Math.floor((10 * done) / Math.max(total, 1));
    if (tenth > shown) console.error(`BPE tokenizer: ${done}/${total} tokens`);
    shown = tenth;
  };
}

/** A partial HF config over the preset's: the keys given replace the preset's, the rest stay. */
function configOverride(file: string, preset: PresetName, seq: number) {
  const raw = readJsonObject('--config', file, 'a JSON object of HF config.json keys');
  const unknown = modelConfigKeyProblems(raw, `--config ${file}`);
  if (unknown.length) throw new UsageError(unknown[0] + (unknown.length > 1 ? ` (and ${unknown.length - 1} more unknown key(s))` : ''));
  if (raw.attention_dropout !== undefined && raw.attention_dropout !== 0) {
    throw new UsageError(`--config ${file}: attention_dropout expects 0 (this lab trains without dropout), got ${JSON.stringify(raw.attention_dropout)}`);
  }
  const p = PRESETS[preset];
  const { head_dim: _hd, ...base } = hfConfigJson({ ...p, max_position_embeddings: Math.max(p.max_position_embeddings, seq) });
  try {
    return modelConfigFromHf({ ...base, ...raw });
  } catch (e) {
    throw new UsageError(`--config ${file}: ${(e as Error).message}`);
  }
}

function loadScheme(arg: string, numLayers: number): Scheme {
  if (SCHEME_PRESETS[arg]) return SCHEME_PRESETS[arg];
  if (!arg.endsWith('.json')) throw new UsageError(`--scheme expects a preset (${Object.keys(SCHEME_PRESETS).join(', ')}) or a .json file, got '${arg}'`);
  const raw = readJsonObject('--scheme', arg, 'a JSON scheme (docs/schemes.md)');
  const problems = schemeKeyProblems(raw, numLayers);
  if (problems.length) throw new UsageError(`--scheme ${arg}: ${problems[0]}${problems.length > 1 ? ` (and ${problems.length - 1} more problem(s))` : ''}`);
  try {
    return parseScheme(raw);
  } catch (e) {
    throw new UsageError(`--scheme ${arg}: ${(e as Error).message}`);
  }
}

/**
 * What the trainer would refuse once the GPU is up, checked here so that --plan says no too: the
 * budget's resolution, features the engine does not execute, the tensor-parallel split, the data's length.
 */
function checkFeasible(opts: TrainOptions, schemeArg: string, corpus: TokenCorpus, dataArg: string): TrainingPlan {
  const tp = opts.scheme?.tp;
  if (tp && tp.degree > 1) {
    const p = tpProblem(modelDims(opts.model, opts.batch, opts.seq), tp);
    if (p) throw new UsageError(`--scheme ${schemeArg} cannot split this model: ${p}`);
  }
  let plan: TrainingPlan;
  try {
    plan = resolveTrainingPlan(opts);
    assertSupported(plan.scheme);
  } catch (e) {
    throw new UsageError(`--scheme ${schemeArg}: ${(e as Error).message}`);
  }
  try {
    const data = datasetOf(corpus, opts.seed);
    data.batch(0, opts.batch, opts.seq, 'train');
    if (opts.evalEvery > 0) data.valBatches(1, opts.batch, opts.seq);
  } catch (e) {
    throw new UsageError(`--data ${dataArg} with --seq ${opts.seq}: ${(e as Error).message}`);
  }
  return plan;
}

function outDirCheck(out: string, opts: TrainOptions, o: { overwrite?: boolean; resume?: boolean }): void {
  try {
    checkOutDir(out, { ...o, needBytes: runDiskBytes(paramLayout(opts.model).count) });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/** Flags that define the run, with where its value lives in the resumed run's options. */
const RUN_FLAGS: [keyof Flags, (o: TrainOptions) => number][] = [
  ['steps', (o) => o.optimizer.total_steps], ['batch', (o) => o.batch], ['seq', (o) => o.seq], ['lr', (o) => o.optimizer.lr],
  ['min-lr', (o) => o.optimizer.min_lr], ['warmup', (o) => o.optimizer.warmup_steps], ['weight-decay', (o) => o.optimizer.weight_decay],
  ['grad-clip', (o) => o.optimizer.grad_clip], ['seed', (o) => o.seed], ['eval-every', (o) => o.evalEvery], ['eval-batches', (o) => o.evalBatches],
];

/** --resume DIR: the run's own options, its data (unchanged) and its last checkpoint (verified). */
async function resumePlan(a: Flags, dir: string, cadence: Partial<CadenceSpec>): Promise<Omit<TrainPlan, 'cpu' | 'exportInit' | 'dumpBatches' | 'plan' | 'tune' | 'merge'>> {
  for (const f of ['config', 'scheme', 'overwrite', 'export-init', 'dump-batches', 'plan', 'tokenizer', 'init', 'text-field', 'lora', 'lora-alpha', 'lora-dropout', 'lora-targets', 'adapter', 'qlora'] as const) {
    if (a[f] !== undefined) throw new UsageError(`--${f} cannot be combined with --resume (a resumed run keeps the options of ${path.join(dir, 'run.json')})`);
  }
  if (a.out !== undefined && path.resolve(a.out) !== path.resolve(dir)) throw new UsageError(`--out ${a.out} conflicts with --resume ${dir}: a resumed run writes to its own directory`);
  const runFile = path.join(dir, 'run.json');
  const run = readJsonObject('--resume', runFile, 'the run.json of a run started by npm run train');
  const bad = (why: string) => new UsageError(`--resume ${dir}: ${runFile} ${why}`);
  let stored: RunSpec;
  try {
    stored = run.spec !== undefined ? validateRunSpec(run.spec) : legacySpec(run);
  } catch (e) {
    throw bad(`does not hold a run's options: ${(e as Error).message}`);
  }
  // The sample and the checkpoints' period are this command line's; everything else is the run's.
  const { samplePrompt: _prompt, ...kept } = stored.cadence;
  // Checkpointing changes memory, not the arithmetic: a resumed run may switch it on.
  const spec: RunSpec = { ...stored, cadence: { ...kept, ...cadence }, ...(a['checkpoint-activations'] ? { checkpointActivations: true } : {}) };
  const opts = trainOptionsOf(spec);
  const preset = spec.preset;
  if (a.model !== undefined && a.model !== run.preset) throw new UsageError(`--model ${a.model} conflicts with the run being resumed (model ${String(run.preset ?? 'unrecorded')} in ${runFile}); drop it or start a new run`);
  for (const [flag, get] of RUN_FLAGS) {
    const v = a[flag] as string | undefined;
    if (v !== undefined && Number(v) !== get(opts)) {
      throw new UsageError(`--${flag} ${v} conflicts with the run being resumed (${flag} ${get(opts)} in ${runFile}); drop it or start a new run`);
    }
  }
  const recorded = run.data as { files?: unknown; text_field?: unknown } | undefined;
  const files = Array.isArray(recorded?.files) ? recorded.files as { path?: unknown; sha256?: unknown }[] : null;
  if (!files?.length || files.some((f) => typeof f?.path !== 'string' || typeof f.sha256 !== 'string')) throw bad('names no training data (data.files with path and sha256)');
  const textField = typeof recorded!.text_field === 'string' ? recorded!.text_field : undefined;
  const data = await loadData(a.data ?? files.map((f) => f.path as string).join(','), textField);
  if (data.files.length !== files.length || data.files.some((f, i) => f.sha256 !== files[i].sha256)) {
    throw new UsageError(`--data ${a.data ?? 'of the run'} is not the data the run was trained on (the files' sha256 differ from ${runFile}'s data.files)`);
  }
  let tokenizer: Tokenizer;
  try {
    const t = run.tokenizer as { file?: unknown } | undefined;
    tokenizer = typeof t?.file === 'string'
      ? tokenizerFromJSON(readJsonObject('--resume', path.join(dir, path.basename(t.file)), 'the run\'s tokenizer.json'))
      : tokenizerFromJSON(run.tokenizer);
  } catch (e) {
    throw bad(`has no usable tokenizer: ${(e as Error).message}`);
  }
  outDirCheck(dir, opts, { resume: true });
  const { corpus, cached } = cachedCorpus(data, tokenizer, { field: textField, cacheDir: path.join('.cache', 'tokens') });
  return {
    preset, opts, scheme: opts.scheme ?? SCHEME_PRESETS.fp32, data, textField, corpus, cached, tokenizer, init: null, out: dir, overwrite: false,
    spec,
    adapters: null, resume: { point: resumePoint(dir, opts) }, resolved: null,
  };
}

/**
 * The spec a run.json written before it held one describes (npm run train's runs on one device):
 * its options, eval settings, checkpoint period, data and tokenizer.
 */
function legacySpec(run: Record<string, unknown>): RunSpec {
  const ev = run.eval as { every?: unknown; batches?: unknown } | undefined;
  const opts = validateTrainOptions({ model: run.model, optimizer: run.optimizer, batch: run.batch, seq: run.seq, seed: run.seed, evalEvery: ev?.every, evalBatches: ev?.batches, scheme: run.scheme });
  const preset = (typeof run.preset === 'string' && PRESET_NAMES.includes(run.preset as PresetName) ? run.preset : 'micro') as PresetName;
  const every = run.checkpoint_every;
  const data = run.data as { files?: { path?: unknown }[]; text_field?: unknown } | undefined;
  const files = Array.isArray(data?.files) ? data.files.map((f) => f?.path).filter((p): p is string => typeof p === 'string') : [];
  const kind = (run.tokenizer as { kind?: unknown } | undefined)?.kind;
  const tokenizer = kind === 'bpe' || kind === 'hf' ? kind : 'char';
  return validateRunSpec({
    preset, model: opts.model, optimizer: opts.optimizer, batch: opts.batch, seq: opts.seq, seed: opts.seed, ...(opts.scheme ? { scheme: opts.scheme } : {}),
    data: { source: files.length ? files.join(',') : BUNDLED_DATASET, ...(typeof data?.text_field === 'string' && data.text_field ? { textField: data.text_field } : {}) },
    tokenizer: { kind: tokenizer, source: tokenizer },
    cadence: {
      evalEvery: opts.evalEvery, evalBatches: opts.evalBatches,
      checkpointEvery: typeof every === 'number' && Number.isInteger(every) && every >= 0 ? every : DEFAULT_CHECKPOINT_EVERY,
      sampleEvery: 0, sampleLength: 0, sampleAtEnd: true, temperature: DEFAULT_SAMPLE_TEMPERATURE,
    },
    strategy: { kind: 'single' },
  });
}

/** The run's last committed checkpoint, verified against its manifest and the run's options (train's and the peer's --resume). */
export function resumePoint(dir: string, opts: TrainOptions): ResumePoint | null {
  let got;
  try {
    got = readLatestCheckpoint(dir);
  } catch (e) {
    if (e instanceof CheckpointError) throw new UsageError(`--resume ${dir}: ${e.message}`);
    throw e;
  }
  if (!got) return null;
  const refuse = (why: string) => new UsageError(`--resume ${dir}: the checkpoint in ${got.dir} ${why}`);
  let ck;
  try {
    ck = loadCheckpoint(got.files);
  } catch (e) {
    throw refuse(`cannot be loaded: ${(e as Error).message}`);
  }
  const train = ck.extra?.train as { options?: unknown; step?: unknown; lossScale?: LossScaleCheckpoint } | undefined;
  if (!ck.extra?.optimizer) throw refuse('has no optimizer state');
  if (ck.extra.optimizer.step !== got.step || train?.step !== got.step) throw refuse(`mixes steps (manifest ${got.step}, optimizer ${ck.extra.optimizer.step}, lab.json ${String(train?.step)})`);
  if (canonical(train.options) !== canonical(opts)) throw refuse('was written with other options than run.json records');
  // The loss scaler's state (runs with loss scaling) rides in lab.json's train entry; the trainer checks it against its plan.
  const optimizer = train.lossScale ? { ...ck.extra.optimizer, lossScale: train.lossScale } : ck.extra.optimizer;
  if (!!ck.adapters !== !!opts.lora) throw refuse(opts.lora ? 'has no LoRA adapters, but the run trains them' : 'holds LoRA adapters, but the run trains every parameter');
  return { step: got.step, params: ck.params, ...(ck.adapters ? { adapters: ck.adapters.tensors } : {}), optimizer, files: got.files };
}

/** JSON with sorted keys: the same value whatever order its objects were built in. */
function canonical(v: unknown): string {
  return JSON.stringify(v, (_k, x: unknown) => (x && typeof x === 'object' && !Array.isArray(x)
    ? Object.fromEntries(Object.entries(x as Record<string, unknown>).sort(([p], [q]) => (p < q ? -1 : p > q ? 1 : 0))) : x));
}
