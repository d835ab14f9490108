/**
 * npm run train -- [options]: trains on WebGPU in Node (Dawn; SwiftShader when no GPU) with the same
 * engine as the browser. Writes run.json, metrics.jsonl, checkpoints/ and a Hugging Face export to
 * --out (run-dir.ts); Ctrl-C checkpoints the last completed step and --resume continues from it.
 */
import path from 'node:path';
import cliProgress from 'cli-progress';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { type CheckpointFiles, loadCheckpoint, saveCheckpoint } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';
import type { Tokenizer } from '../engine/train/tokenizer/tokenizer';
import { writeExport } from './checkpoint-store';
import { writeNpy } from '../engine/io/npy';
import { initParams, paramLayout, unflatten } from '../engine/model/params';
import { datasetOf, valBitsPerByte } from '../engine/train/data/datasets';
import { newlinePrompt } from '../engine/train/tokenizer/tokenizer';
import { bitsAndWire } from '../engine/train/probe-bits';
import { runTraining } from '../engine/train/loop';
import { cadenceOf, specWithOptions } from '../engine/run/spec';
import { resolveTrainingPlan, type TrainingPlan } from '../engine/plan/train-plan';
import { f16DeviceFeatures, hfTokenizerFiles, type Trainer } from '../engine/train/trainer';
import { createParallelTrainer } from '../parallel/factory';
import { fail } from './common';
import { INTERRUPTED_EXIT, interruptOnSignals } from './interrupt';
import { RunDir } from './run-dir';
import { parseTrainArgs, TRAIN_HELP, type TrainPlan } from './train-options';
import { prepareRunKernels, type RunTuning, runTuneCache, runTuning } from './tune-cache';
import { runTuningStatus } from '../engine/tune';

/** --plan: the memory plan of the checked options (resolved once, `plan`), as JSON. */
function printPlan(p: TrainPlan, plan: TrainingPlan): void {
  const { opts } = p;
  const choice = plan.budget;
  console.log(JSON.stringify({
    model: p.preset, scheme: p.scheme.name, params: paramLayout(opts.model).count, vocab_size: opts.model.vocab_size, tokenizer: p.tokenizer.kind,
    batch: opts.batch, seq: opts.seq, bytes: plan.memory,
    ...(plan.model.lora ? { lora: { ...plan.model.lora.spec, trainable_params: plan.model.lora.layout.count } } : {}),
    ...(plan.model.qlora ? { qlora: { ...plan.model.qlora.spec, quantized_params: plan.model.qlora.linears.reduce((s, l) => s + l.rows * l.cols, 0) } } : {}),
    ...(plan.model.checkpoint ? { checkpoint_activations: true } : {}),
    ...(choice ? { budget: choice.budget, bits: choice.bits } : {}),
    bits_and_wire: bitsAndWire(plan.model),
  }, null, 2));
}

async function main(): Promise<number> {
  const p = await parseTrainArgs(process.argv.slice(2));
  if (!p) {
    console.log(TRAIN_HELP);
    return 0;
  }
  // The run resolved once: --plan prints it, the trainer builds it.
  let plan = p.resolved ?? resolveTrainingPlan(p.opts);
  if (p.plan) {
    printPlan(p, plan);
    return 0;
  }
  const { opts, out } = p;
  const steps = opts.optimizer.total_steps;
  const point = p.resume?.point ?? null;
  const run = new RunDir(out);
  if (point && point.step >= steps) {
    // Trained to the end: only the export may be missing (a full disk after the last checkpoint).
    run.export(point.step, point.files);
    if (p.merge) writeMerged(out, point.step, point.files, p.tokenizer);
    console.error(`the run in ${out} is complete (${point.step} of ${steps} steps); its export is written`);
    console.log(JSON.stringify({ out, steps, final_val_loss: null, resumed_from: point.step }));
    return 0;
  }

  // The tuning cache is read before the GPU starts (with --tune a malformed one is bad input).
  const tuneCache = runTuneCache(p.tune !== null);
  let bar: cliProgress.SingleBar | null = null;
  const interrupt = interruptOnSignals(() => bar?.stop());
  // Dawn exposes subgroup matrices (the INT8 GEMMs' tensor-core path) only behind its unsafe APIs.
  // f16 GEMMs' tensor-core path is subgroup matrices too (acquireNodeGpu adds the toggle that exposes shader-f16 on NVIDIA).
  const gpu = await acquireNodeGpu({ forceSwiftShader: p.cpu, dawnFlags: plan.int8TensorCores || plan.f16 ? ['enable-dawn-features=allow_unsafe_apis'] : undefined });
  const ai = gpu.adapterInfo;
  console.error(`adapter: ${[ai.vendor, ai.architecture, ai.device, ai.description].filter(Boolean).join(' / ') || 'unknown'}`);
  const rt = new Runtime(gpu);
  const tuned = await prepareRunKernels(rt, opts, tuneCache, p.tune);
  // f16 GEMMs: their path is this device's (shader-f16, verified tensor-core layouts), so the plan is resolved again with its features.
  if (plan.f16) plan = resolveTrainingPlan(plan.opts, { device: await f16DeviceFeatures(rt, { probe: true }) });
  const trainer = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts, text: '', init: {
    tokenizer: p.tokenizer, data: datasetOf(p.corpus, opts.seed), params: point?.params ?? p.init?.params, optimizer: point?.optimizer, plan,
    adapters: point?.adapters ?? p.adapters ?? undefined,
  } });
  // Only once the model is built: a run the GPU cannot hold leaves no directory behind.
  run.create({ overwrite: p.overwrite });
  // Where this run's kernel choices came from (tuned on this GPU, partly, or defaults: shipped table, heuristic).
  const tuning = runTuning(runTuningStatus(rt), tuned);
  console.error(`kernels: ${tuning.label}`);
  if (trainer.budgetChoice) {
    console.error(`memory budget ${trainer.budgetChoice.budget} B: bits per layer and kind ${JSON.stringify(trainer.budgetChoice.bits)}`);
  }
  if (p.resume) console.error(`resuming ${out} at step ${trainer.stepIndex} of ${steps}`);
  else writeStartFiles(p, run, trainer, gpu.adapterInfo, tuning);
  run.openMetrics(p.resume ? trainer.stepIndex : null);

  const tty = process.stderr.isTTY;
  bar = tty
    ? new cliProgress.SingleBar({ format: 'train |{bar}| {value}/{total} loss {loss} val {val} {tps} tok/s', hideCursor: true, gracefulExit: false },
      cliProgress.Presets.shades_classic)
    : null;
  bar?.start(steps, trainer.stepIndex, { loss: '-', val: '-', tps: '-' });
  let sampled: string | null = null;
  const fmtVal = (v: number) => v.toFixed(4);
  let lastVal = '-';
  let result;
  try {
    // The prompt must be in the vocabulary (--sample-prompt, else a newline where it has one): a text without a newline samples from token 0.
    result = await runTraining(trainer, cadenceOf(p.spec, { resumed: point !== null, prompt: newlinePrompt(p.tokenizer) }), {
      onStep: (m) => {
        const s = m.step;
        run.metric(m);
        bar?.update(s + 1, { loss: m.loss.toFixed(4), val: lastVal, tps: Math.round(m.tokens_per_s) });
        if (!tty && (s % 10 === 0 || s === steps - 1)) {
          console.error(`step ${s}: loss ${m.loss.toFixed(4)} lr ${m.lr.toExponential(2)} grad_norm ${m.grad_norm.toFixed(3)} ${Math.round(m.tokens_per_s)} tok/s`);
        }
      },
      // Logged at the number of steps done.
      onEval: (s, loss) => {
        lastVal = fmtVal(loss);
        bar?.update({ val: lastVal });
        run.metric({ step: s + 1, val_loss: loss, val_bpb: valBitsPerByte(p.corpus, loss) });
        if (!tty) console.error(`step ${s + 1}: val_loss ${loss.toFixed(4)}`);
      },
      // Per-layer ‖x − x̂‖/‖x‖ of what the scheme quantizes in the forward pass (none under fp32 or TACO).
      onQuantErrors: (s, quantError) => run.metric({ step: s + 1, quant_error: quantError }),
      onSample: (_s, text) => void (sampled = text),
      onCheckpoint: (step, files) => {
        if (step < steps) return run.checkpoint(step, files);
        run.finish(step, files);
        if (p.merge) writeMerged(out, step, files, p.tokenizer);
      },
    }, { stopRequested: () => interrupt.requested() });
  } finally {
    bar?.stop();
    interrupt.dispose();
  }
  if (sampled !== null) console.log(sampled);
  const summary = { out, steps, final_val_loss: result.lastEval, mem: trainer.memory(), ...(result.stopped ? { stopped_at: trainer.stepIndex } : {}) };
  console.log(JSON.stringify(summary));
  const done = trainer.stepIndex;
  trainer.destroy();
  rt.destroy();
  if (result.stopped) {
    console.error(`interrupted after ${done} of ${steps} steps; checkpoint in ${path.join(out, 'checkpoints')}; continue with: npm run train -- --resume ${out}`);
    return INTERRUPTED_EXIT;
  }
  return 0;
}

/** --merge: DIR/merged, a full HF checkpoint of the model with the run's LoRA adapters merged in (PEFT's merge_and_unload). */
function writeMerged(out: string, step: number, files: CheckpointFiles | Record<string, Uint8Array>, tokenizer: Tokenizer): void {
  const ck = loadCheckpoint(files as Record<string, Uint8Array>);
  if (!ck.adapters) throw new Error('--merge: the run\'s checkpoint holds no adapters');
  const params = mergeLora(ck.config, ck.adapters.spec, ck.params, ck.adapters.tensors);
  const dir = path.join(out, 'merged');
  writeExport(dir, step, { ...saveCheckpoint({ config: ck.config, params, extra: { hfTokenizer: hfTokenizerFiles(tokenizer) } }) });
  console.error(`merged model written to ${dir}`);
}

/** A new run's run.json (every resolved setting, what --resume reads back) and the optional init and batch dumps. */
function writeStartFiles(p: TrainPlan, run: RunDir, trainer: Trainer, device: unknown, tuning: RunTuning): void {
  const { opts } = p;
  const steps = opts.optimizer.total_steps;
  run.writeRunInfo({
    // The run spec as the trainer runs it (its resolved options): what --resume reads back. The fields
    // beside it say the same for readers of older runs and add what the run found (data, device).
    spec: specWithOptions(p.spec, trainer.opts),
    preset: p.preset,
    model: trainer.opts.model,
    optimizer: trainer.opts.optimizer,
    batch: opts.batch,
    seq: opts.seq,
    seed: opts.seed,
    eval: { every: opts.evalEvery, batches: opts.evalBatches },
    checkpoint_every: p.spec.cadence.checkpointEvery,
    data: {
      files: p.data.files, text_field: p.textField ?? 'text', documents: p.corpus.documents, tokens: p.corpus.tokens.length,
      train_tokens: p.corpus.trainTokens, bytes: p.corpus.bytes, cached: p.cached,
    },
    // A BPE or imported tokenizer is DIR/tokenizer.json; the character tokenizer is small enough to inline.
    tokenizer: p.tokenizer.kind === 'char' ? p.tokenizer.toJSON()
      : { kind: p.tokenizer.kind, vocab_size: p.tokenizer.vocabSize, eos_id: p.tokenizer.eosId, file: 'tokenizer.json' },
    ...(p.init ? { init: p.init.dir } : {}),
    // As the trainer runs it (a memory budget already turned into per-layer bits).
    scheme: trainer.plan.scheme,
    // Exact bits per element and wire bytes of this scheme and model (not measured).
    bits_and_wire: bitsAndWire(trainer.plan.model),
    // The kernel each layer's forward, dX and dW GEMMs run on this device (fp32, int8-dot4, int8-tensor-core, f16-*).
    gemm_paths: trainer.computePaths(),
    // Dynamic loss scaling's configuration (GradScaler's arguments), null when the run does not scale.
    loss_scaling: trainer.plan.model.lossScale,
    device,
    // Where the kernel choices came from: tuned on this GPU, partly, or defaults (cli/tune-cache.ts RunTuning).
    tuning,
    params: paramLayout(opts.model).count,
    started: new Date().toISOString(),
  });
  if (p.tokenizer.kind !== 'char') run.writeFile('tokenizer.json', JSON.stringify(p.tokenizer.hfJSON()) + '\n');
  if (p.exportInit) {
    const layout = paramLayout(opts.model);
    const files = saveCheckpoint({ config: opts.model, params: unflatten(initParams(opts.model, layout, opts.seed), layout) });
    run.writeFile(path.join('init', 'model.safetensors'), files['model.safetensors']);
    run.writeFile(path.join('init', 'config.json'), files['config.json']);
  }
  if (p.dumpBatches) {
    const per = opts.batch * (opts.seq + 1);
    const all = new Int32Array(steps * per);
    for (let s = 0; s < steps; s++) all.set(trainer.batchAt(s), s * per);
    run.writeFile('batches.npy', writeNpy(all, [steps, opts.batch, opts.seq + 1]));
  }
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then((code) => {
  clearInterval(keepAlive);
  process.exit(code);
}, fail);
