/**
 * The trainer: one model, one dataset, one optimizer, driven step by step by the CLI, the browser
 * worker and the tests alike. A step is one command buffer (forward, loss, backward, clipping, AdamW);
 * the only data coming back is the loss and the gradient norm (8 bytes) after it completes.
 */
import type { MemReport } from '../gpu/memory';
import type { Dispatch, Runtime } from '../gpu/runtime';
import { saveCheckpoint, type CheckpointFiles, type HfTokenizerFiles } from '../io/checkpoint';
import { enableI8TensorCores, i8TensorCoreSpec } from '../kernels/qgemm/tc';
import { enableF16TensorCores, f16TensorCoreSpec } from '../kernels/matmul-f16/matmul-f16';
import { enableF16Attention } from '../kernels/attention/f16/checks';
import { f16AttentionBackwardHeadDims, f16AttentionHeadDims, f16AttentionProbed } from '../kernels/attention/f16/picks';
import type { F16Features } from '../model/compute-plan';
import type { LayerPaths } from '../model/int8-gemms';
import { LlamaGpu } from '../model/llama';
import { Decoder } from '../model/decode';
import { initLoraTensors } from '../lora/spec';
import { mergeLora } from '../lora/merge';
import { flatten, initParams, unflatten } from '../model/params';
import { packAdamwStep } from '../optim/adamw';
import { type LossScalerState } from '../optim/loss-scale';
import { type GpuLossScaleState, packLossScaleState, readLossScaleState } from '../optim/loss-scale-gpu';
import { lrAt } from '../optim/schedule';
import { type BudgetChoice, resolveTrainingPlan, type TrainingPlan } from '../plan/train-plan';
import type { WireFormat } from '../scheme/wire';
import { type BatchSource, TextDataset } from './data/data';
import { streamText } from './generate-text';
import { QuantErrorProbe, type QuantErrorRecord } from './probe';
import { type OptimizerConfig, type TrainOptions, validateTrainOptions } from './options';
import type { RunTrainer } from './run-trainer';
import { CharTokenizer, type Tokenizer } from './tokenizer/tokenizer';

export type { OptimizerConfig, TrainOptions } from './options';
export { defaultTrainOptions } from './options';

export interface StepMetrics {
  step: number;
  loss: number;
  lr: number;
  grad_norm: number;
  tokens_per_s: number;
  mem: MemReport;
  elapsed_s: number;
  /** Loss scaling (plan.lossScaling): the scale the step's gradients were seeded with … after its update. */
  loss_scale?: number;
  /** Loss scaling: steps skipped for inf/NaN gradients so far in the run (this one included). */
  skipped_steps?: number;
}

/** The loss scaler's state as a checkpoint keeps it: GradScaler's state_dict and the run's skipped steps. */
export interface LossScaleCheckpoint extends LossScalerState {
  skipped: number;
}

const lossScaleCheckpoint = (s: GpuLossScaleState): LossScaleCheckpoint => ({
  scale: s.scale, growthFactor: s.growthFactor, backoffFactor: s.backoffFactor, growthInterval: s.growthInterval, growthTracker: s.growthTracker, skipped: s.skipped,
});

/** A run's state in the model's flat layout (data parallelism hands it to late joiners). */
export interface FlatTrainingState {
  weights: Float32Array;
  m: Float32Array;
  v: Float32Array;
  step: number;
  /** The loss scaler's state (runs with loss scaling): members of a group must seed with the same scale. */
  lossScale?: LossScaleCheckpoint;
}

export interface TrainerInit {
  /** Initial flat parameters (default: seeded HF init); with LoRA, the frozen base. */
  params?: Map<string, Float32Array>;
  /** LoRA runs: the adapters to continue from (default: PEFT's init from the run's seed). Names as engine/lora/spec.ts. */
  adapters?: Map<string, Float32Array>;
  /** Resume: optimizer moments and step. */
  optimizer?: { m: Map<string, Float32Array>; v: Map<string, Float32Array>; step: number; lossScale?: LossScaleCheckpoint };
  tokenizer?: Tokenizer;
  /** Pre-tokenized data (datasets.ts, or streamed from token stores: token-stream.ts); the text argument is then unused. */
  data?: BatchSource;
  /**
   * The run's plan, already resolved (resolveTrainingPlan) from these options with the tokenizer's
   * vocabulary: the trainer builds from it instead of resolving again.
   */
  plan?: TrainingPlan;
  /** The member will train in DiLoCo: its pseudo-gradients' wire format goes into the plan (plan.wire.diloco). */
  diloco?: { wire: WireFormat };
}

/**
 * Validated options whose model vocabulary is the tokenizer's; `keepLarger`: an imported model's
 * embedding may have more rows than its tokenizer has ids (padded vocabularies), and keeps them.
 */
export function optionsForTokenizer(raw: TrainOptions, tokenizer: Tokenizer, o: { keepLarger?: boolean } = {}): TrainOptions {
  const opts = validateTrainOptions(raw);
  if (opts.model.vocab_size === tokenizer.vocabSize || (o.keepLarger && opts.model.vocab_size > tokenizer.vocabSize)) return opts;
  return validateTrainOptions({ ...opts, model: { ...opts.model, vocab_size: tokenizer.vocabSize } });
}

/**
 * Writes a model's AdamW step parameters (lr of the schedule, bias-correction step, clip norm); returns
 * the lr. `skipped`: steps the loss scaler skipped before this one — Adam's own step count (the bias
 * correction) advances on applied steps only, as torch's does when GradScaler skips optimizer.step().
 */
export function writeAdamwStep(rt: Runtime, model: LlamaGpu, step: number, o: OptimizerConfig, skipped = 0): number {
  const lr = lrAt(step, o);
  rt.write(model.b('stepParams'), new Uint8Array(packAdamwStep({
    lr, beta1: o.beta1, beta2: o.beta2, eps: o.eps, weightDecay: o.weight_decay, step: step + 1 - skipped, maxNorm: o.grad_clip,
  })));
  return lr;
}

/**
 * The runtime's f16 features as a plan resolves the f16 GEMMs' and attention's paths from them;
 * `probe`: verify the f16 tensor-core layouts and the f16 attention kernels first (once per runtime,
 * as enableI8TensorCores), where the device has shader-f16 and subgroup matrices, so what passed counts.
 */
export async function f16DeviceFeatures(rt: Runtime, o: { probe?: boolean } = {}): Promise<F16Features> {
  const f = rt.gpu.features;
  if (o.probe && f.shaderF16 && f.subgroupMatrix && !f16TensorCoreSpec(rt, 'NT')) await enableF16TensorCores(rt);
  if (o.probe && f.shaderF16 && f.subgroupMatrix && !f16AttentionProbed(rt)) await enableF16Attention(rt);
  return { shaderF16: f.shaderF16, tensorCores: !!f16TensorCoreSpec(rt, 'NT'), attentionHeadDims: f16AttentionHeadDims(rt), attentionBackwardHeadDims: f16AttentionBackwardHeadDims(rt) };
}

/** The checkpoint files of a run at `step`: full tensors of the weights and Adam moments. */
export function runCheckpoint(opts: TrainOptions, tokenizer: Tokenizer, step: number,
  state: { params: Map<string, Float32Array>; m: Map<string, Float32Array>; v: Map<string, Float32Array>; lossScale?: LossScaleCheckpoint; adapters?: Map<string, Float32Array> }): CheckpointFiles {
  if (!!opts.lora !== !!state.adapters) throw new Error(opts.lora ? 'runCheckpoint: a LoRA run needs its adapters' : 'runCheckpoint: adapters given for a run without LoRA');
  return saveCheckpoint({
    config: opts.model,
    params: state.params,
    ...(opts.lora && state.adapters ? { adapters: { spec: opts.lora, tensors: state.adapters } } : {}),
    extra: {
      optimizer: { m: state.m, v: state.v, step },
      tokenizer: tokenizer.toJSON(),
      train: { options: opts, step, ...(state.lossScale ? { lossScale: state.lossScale } : {}) },
      hfTokenizer: hfTokenizerFiles(tokenizer),
    },
  });
}

/** What the HF export needs of a tokenizer: its tokenizer.json and end-of-text token. */
export function hfTokenizerFiles(tokenizer: Tokenizer): HfTokenizerFiles {
  const id = tokenizer.eosId;
  return { json: tokenizer.hfJSON(), eos: id === null ? null : { id, content: tokenizer.decode([id]) } };
}

/** A finished step's metrics (trainers of every kind); a non-finite loss stops the run. */
export function stepMetrics(
  opts: TrainOptions,
  s: { step: number; loss: number; lr: number; gradNorm: number; t0: number; startTime: number; mem: MemReport; lossScale?: { scale: number; skipped: number } },
): StepMetrics {
  const now = performance.now();
  if (!Number.isFinite(s.loss)) throw new Error(`loss is ${s.loss} at step ${s.step}: training diverged`);
  return {
    step: s.step,
    loss: s.loss,
    lr: s.lr,
    grad_norm: s.gradNorm,
    tokens_per_s: (opts.batch * opts.seq) / ((now - s.t0) / 1000),
    mem: s.mem,
    elapsed_s: (now - s.startTime) / 1000,
    ...(s.lossScale ? { loss_scale: s.lossScale.scale, skipped_steps: s.lossScale.skipped } : {}),
  };
}

/**
 * computeGradients in segments: backward cut before each dispatch index in `cuts` (ascending, in
 * (0, backward.length]; LlamaGpu.gradFinal says which gradients each cut completes).
 */
export interface BackwardSegments {
  cuts: number[];
  /** Called right after segment i is submitted (the GPU may still be running it). */
  onSegment: (i: number) => void;
}

let nextTrainerId = 0;

/** A step whose command buffer is submitted: its index, lr, the readback its loss is copied into, and when it was submitted. */
interface SubmittedStep {
  step: number;
  lr: number;
  readback: GPUBuffer;
  t0: number;
}

export class Trainer implements RunTrainer<StepMetrics> {
  /** Owner tag of this run's allocations in the device's memory ledger. */
  readonly id: string;
  private stepCount = 0;
  private startTime = performance.now();
  /**
   * The next step's command buffer, recorded while the GPU ran the last one (trainStep), with the
   * readback buffer it copies the loss into (steps alternate between two).
   */
  private recordedStep?: { commands: GPUCommandBuffer; readback: GPUBuffer };
  /** The step trainStep({ next: true }) submitted ahead: its index, lr and readback buffer. */
  private ahead?: SubmittedStep;
  /** When the last step's loss was read: a step submitted before then started on the GPU no earlier. */
  private lastFinish = 0;
  /**
   * Loss scaling: steps skipped so far as the last readback told (AdamW's bias-correction step is
   * step + 1 − skipped). A step submitted ahead of that readback uses the count before it: after a
   * skip, one pipelined step's bias correction is one step ahead (skips are rare after the first few steps).
   */
  private skipped = 0;

  /** Generation with a KV cache over the model's weights (samples during training and on request); null for QLoRA (sample() makes one). */
  readonly decoder: Decoder | null;
  /** Per-layer quantization error of the forward's quantized tensors (null when nothing is quantized there). */
  private probe: QuantErrorProbe | null;

  /** The options as resolved into the plan (a memory budget already turned into per-layer bits). */
  readonly opts: TrainOptions;

  private constructor(
    readonly rt: Runtime,
    /** The run's plan, resolved once: what the model allocates and runs, the predicted memory, the wire formats. */
    readonly plan: TrainingPlan,
    readonly model: LlamaGpu,
    readonly data: BatchSource,
    readonly tokenizer: Tokenizer,
    owner: string,
  ) {
    this.id = owner;
    const opts = plan.opts;
    this.opts = opts;
    const lora = model.plan.lora ? { plan: model.plan.lora, weights: model.b('lora.weights') } : null;
    this.decoder = model.plan.qlora ? null : rt.mem.withOwner(owner, () => new Decoder(rt, opts.model, model.b('weights'), opts.seq, lora));
    this.probe = rt.mem.withOwner(owner, () => QuantErrorProbe.create(rt, model));
  }

  /**
   * Builds a run from its options (resolved here, once, into a TrainingPlan) or from `init.plan`,
   * resolved by the caller from the same options (then nothing is resolved again).
   */
  static async create(rt: Runtime, rawOpts: TrainOptions, text: string, init: TrainerInit = {}): Promise<Trainer> {
    const tokenizer = init.tokenizer ?? CharTokenizer.fromText(text);
    const opts = optionsForTokenizer(rawOpts, tokenizer, { keepLarger: init.params !== undefined });
    if (init.plan && init.plan.opts.model.vocab_size !== opts.model.vocab_size) {
      throw new Error(`Trainer.create: the plan is for a vocabulary of ${init.plan.opts.model.vocab_size}, the tokenizer's is ${opts.model.vocab_size}`);
    }
    // The f16 GEMMs' path comes from the device's features (a tensor-core layout counts once enableF16TensorCores verified it).
    let plan = init.plan ?? resolveTrainingPlan(opts, { diloco: init.diloco ?? null, device: await f16DeviceFeatures(rt) });
    if (!init.plan && plan.f16 && rt.gpu.features.shaderF16 && (!f16TensorCoreSpec(rt, 'NT') || !f16AttentionProbed(rt))) {
      plan = resolveTrainingPlan(opts, { diloco: init.diloco ?? null, device: await f16DeviceFeatures(rt, { probe: true }) });
    }
    const data = init.data ?? new TextDataset(text, tokenizer, plan.opts.seed);
    const owner = `run${nextTrainerId++}`;
    // INT8 GEMMs run on tensor cores where the device has them and computes them exactly (checked once per runtime).
    if (plan.int8TensorCores && rt.gpu.features.subgroupMatrix && !i8TensorCoreSpec(rt)) await enableI8TensorCores(rt);
    const model = await rt.checked('building the model', () =>
      rt.mem.withOwner(owner, () => new LlamaGpu(rt, plan.model)));
    const flat = init.params ? flatten(init.params, model.layout) : initParams(plan.opts.model, model.layout, plan.opts.seed);
    model.uploadParams(flat);
    const lora = plan.opts.lora;
    if (lora) {
      // PEFT's init (A Kaiming-uniform, B zero) unless adapters to continue were given.
      const tensors = init.adapters ?? initLoraTensors(plan.opts.model, lora, plan.opts.seed);
      model.writeTrainable('weights', flatten(tensors, model.trainable.layout));
    } else if (init.adapters) throw new Error('Trainer.create: adapters were given but the options have no lora');
    const t = new Trainer(rt, plan, model, data, tokenizer, owner);
    if (init.optimizer) {
      model.writeTrainable('m', flatten(init.optimizer.m, model.trainable.layout));
      model.writeTrainable('v', flatten(init.optimizer.v, model.trainable.layout));
      t.stepCount = init.optimizer.step;
      if (init.optimizer.lossScale) t.restoreLossScale(init.optimizer.lossScale);
    }
    await rt.sync();
    return t;
  }

  /** The per-layer bits chosen for a memory budget (null without one). */
  get budgetChoice(): BudgetChoice | null {
    return this.plan.budget;
  }

  get stepIndex(): number {
    return this.stepCount;
  }

  get optimizerConfig(): OptimizerConfig {
    return this.opts.optimizer;
  }

  /** The batch [B, T+1] used at `step` (a pure function of seed and step). */
  batchAt(step: number): Int32Array {
    return this.data.batch(step, this.opts.batch, this.opts.seq, 'train');
  }

  /** One training step's dispatches, in order: forward, backward, AdamW (what trainStep submits as one command buffer). */
  stepDispatches(): Dispatch[] {
    const { model } = this;
    return [...model.forward, ...model.backward, ...model.optimizer];
  }

  /**
   * One training step: its loss, grad norm and lr. `next: true` promises that the caller's next
   * call is trainStep() again: the step after this one is then submitted before this one's loss is
   * read, so the GPU never waits for the host between steps (its inputs — batch, seeds, AdamW's step
   * parameters — are queue writes made after this step's submit, which the queue orders after it).
   * Any other call first completes that step (settle(): it counts, and its metrics are settle()'s).
   */
  async trainStep(o: { next?: boolean } = {}): Promise<StepMetrics> {
    const step = this.stepCount;
    const cur = this.ahead ?? this.submitStep(step, performance.now());
    this.ahead = undefined;
    if (o.next) this.ahead = this.submitStep(step + 1, performance.now());
    // The next step's command buffer is recorded while the GPU runs: recording hundreds of
    // dispatches would otherwise delay the next step's start.
    this.recordedStep = this.recordStep(this.readbackFor(step + (o.next ? 2 : 1)));
    return this.finishStep(cur);
  }

  /** RunTrainer's step: trainStep, submitting the next step ahead on `next`. */
  step(o: { next?: boolean } = {}): Promise<StepMetrics> {
    return this.trainStep(o);
  }

  /**
   * Completes a step that trainStep({ next: true }) submitted ahead, if there is one: it counts
   * (stepIndex moves on) and its metrics are returned (null when nothing was ahead).
   */
  async settle(): Promise<StepMetrics | null> {
    const cur = this.ahead;
    if (!cur) return null;
    this.ahead = undefined;
    return this.finishStep(cur);
  }

  /** Steps alternate between two readback buffers: one submitted ahead copies into the one not being read. */
  private readbackFor(step: number): GPUBuffer {
    return this.model.b(step % 2 === 0 ? 'readback' : 'readbackOdd');
  }

  /** Writes step `step`'s inputs and submits it (the recorded command buffer when it is this step's). */
  private submitStep(step: number, t0: number): SubmittedStep {
    const { model } = this;
    model.setBatch(this.batchAt(step));
    model.setStepSeed(step);
    const lr = this.writeStepParams(step);
    const readback = this.readbackFor(step);
    const recorded = this.recordedStep?.readback === readback ? this.recordedStep.commands : undefined;
    this.recordedStep = undefined;
    this.rt.submit(recorded ?? this.recordStep(readback).commands);
    return { step, lr, readback, t0 };
  }

  private async finishStep(cur: SubmittedStep): Promise<StepMetrics> {
    const [loss, gradNorm, scale, skipped] = await this.read(cur.readback);
    this.stepCount = cur.step + 1;
    // A step submitted ahead waited in the queue for the one before: its time starts when that one's ended.
    const t0 = Math.max(cur.t0, this.lastFinish);
    this.lastFinish = performance.now();
    if (this.plan.lossScaling) this.skipped = skipped;
    const lossScale = this.plan.lossScaling ? { scale, skipped } : undefined;
    return stepMetrics(this.opts, { step: cur.step, loss, lr: cur.lr, gradNorm, t0, startTime: this.startTime, mem: this.memory(), lossScale });
  }

  /** Writes AdamW's per-step parameters (lr of the schedule, bias-correction step, clip norm); returns the lr. */
  private writeStepParams(step: number): number {
    return writeAdamwStep(this.rt, this.model, step, this.opts.optimizer, this.skipped);
  }

  /** The loss scaler's state on the GPU (null without loss scaling). */
  async lossScaleState(): Promise<GpuLossScaleState | null> {
    const ls = this.plan.model.lossScale;
    if (!ls) return null;
    await this.settle();
    return readLossScaleState(this.rt, this.model.b('lossScale'), ls);
  }

  /** Writes a checkpoint's scaler state (scale, growth tracker, skipped steps) back to the GPU (resume does at create). */
  restoreLossScale(s: LossScaleCheckpoint): void {
    this.checkLossScale(s, this.stepCount);
    // A step submitted ahead runs before this write (queue order) and is overwritten by it.
    this.ahead = undefined;
    this.rt.write(this.model.b('lossScale'), new Uint8Array(packLossScaleState(s, s.skipped)));
    this.skipped = s.skipped;
  }

  /** Throws unless `s` is a scaler state this run's plan can take at step `step`. */
  private checkLossScale(s: LossScaleCheckpoint, step: number): void {
    const ls = this.plan.model.lossScale;
    if (!ls) throw new Error('the checkpoint has a loss scaler state; this run does not scale its loss');
    for (const k of ['growthFactor', 'backoffFactor', 'growthInterval'] as const) {
      if (s[k] !== ls[k]) throw new Error(`the checkpoint's loss scaler has ${k} ${s[k]}; this run's plan ${ls[k]}`);
    }
    if (!(Number.isFinite(s.scale) && s.scale > 0 && Number.isInteger(s.growthTracker) && s.growthTracker >= 0
      && s.growthTracker < ls.growthInterval && Number.isInteger(s.skipped) && s.skipped >= 0 && s.skipped <= step)) {
      throw new Error(`the checkpoint's loss scaler state is invalid: ${JSON.stringify(s)}`);
    }
  }

  /**
   * Data parallelism, first half of a step: forward and backward on `batch` [B, T+1] at the current
   * step (same stochastic-rounding seeds as trainStep). The gradient stays in the model's gradient
   * storage for the caller to read (and replace with the group's mean); returns the loss.
   * `segments`: backward as several command buffers with a hook after each submit (a data-parallel
   * member reads finished gradients back while the rest runs); the same dispatches, the same result.
   */
  async computeGradients(batch: Int32Array, segments?: BackwardSegments): Promise<number> {
    await this.settle();
    const { model } = this;
    model.setBatch(batch);
    model.setStepSeed(this.stepCount);
    const [loss] = segments ? await this.runSegments(segments) : await this.runAndRead([...model.forward, ...model.backward], false);
    if (!Number.isFinite(loss)) throw new Error(`loss is ${loss} at step ${this.stepCount}: training diverged`);
    return loss;
  }

  /**
   * Second half: global-norm clipping and AdamW on whatever gradient the model's storage holds now,
   * exactly as trainStep would apply it; advances the step.
   */
  async applyGradients(): Promise<{ lr: number; gradNorm: number }> {
    await this.settle();
    const lr = this.writeStepParams(this.stepCount);
    const [, gradNorm, , skipped] = await this.runAndRead(this.model.optimizer, true);
    if (this.plan.lossScaling) this.skipped = skipped;
    this.stepCount++;
    return { lr, gradNorm };
  }

  /**
   * Weights, Adam moments and step as flat arrays in the trainable layout (the model's; with LoRA the
   * adapters', the frozen base being the run's input): all a run's changing state on the GPU.
   */
  async trainingState(): Promise<FlatTrainingState> {
    await this.settle();
    const { model } = this;
    const [weights, m, v] = await Promise.all([model.readTrainable('weights'), model.readTrainable('m'), model.readTrainable('v')]);
    const ls = await this.lossScaleState();
    return { weights, m, v, step: this.stepCount, ...(ls ? { lossScale: lossScaleCheckpoint(ls) } : {}) };
  }

  /** Replaces the run's state (a late joiner taking a peer's state); sizes are checked, values are the caller's to validate. */
  restoreTrainingState(s: FlatTrainingState): void {
    const n = this.model.trainable.layout.totalFloats;
    for (const [k, a] of [['weights', s.weights], ['m', s.m], ['v', s.v]] as const) {
      if (a.length !== n) throw new Error(`restoreTrainingState: ${k} has ${a.length} floats, the model ${n}`);
    }
    if (!Number.isSafeInteger(s.step) || s.step < 0) throw new Error(`restoreTrainingState: bad step ${s.step}`);
    if (s.lossScale) this.checkLossScale(s.lossScale, s.step);
    // A step submitted ahead runs before these writes (queue order) and is overwritten by them.
    this.ahead = undefined;
    this.model.writeTrainable('weights', s.weights);
    this.model.writeTrainable('m', s.m);
    this.model.writeTrainable('v', s.v);
    this.stepCount = s.step;
    if (s.lossScale) this.restoreLossScale(s.lossScale);
  }

  /**
   * Forward and backward as one command buffer per segment (cut before backward dispatch `cuts[i]`),
   * each submitted before the next is recorded, `onSegment(i)` called right after segment i's submit;
   * the last segment copies the loss back.
   */
  private async runSegments(o: BackwardSegments): Promise<[number, number, number, number]> {
    const { model } = this;
    const n = model.backward.length;
    o.cuts.reduce((prev, c) => {
      if (!(Number.isInteger(c) && c > prev && c <= n)) throw new Error(`computeGradients: segment cuts must ascend within (0, ${n}], got ${o.cuts.join(', ')}`);
      return c;
    }, 0);
    const ends = o.cuts.at(-1) === n ? o.cuts : [...o.cuts, n];
    const readback = this.readbackFor(this.stepCount);
    let at = 0;
    ends.forEach((end, i) => {
      const d = [...(i === 0 ? model.forward : []), ...model.backward.slice(at, end)];
      this.rt.submit(end === n ? this.recordWithReadback(d, false, readback) : this.rt.record(d));
      at = end;
      o.onSegment(i);
    });
    return this.read(readback);
  }

  /** Encodes dispatches in one command buffer, then copies the loss (and grad norm) back and reads them. */
  private async runAndRead(dispatches: Dispatch[], withNorm: boolean): Promise<[number, number, number, number]> {
    await this.settle();
    const readback = this.readbackFor(this.stepCount);
    this.rt.submit(this.recordWithReadback(dispatches, withNorm, readback));
    return this.read(readback);
  }

  /** A whole training step (forward, backward, AdamW, the loss and grad norm's copy back) as one command buffer. */
  private recordStep(readback: GPUBuffer): { commands: GPUCommandBuffer; readback: GPUBuffer } {
    return { commands: this.recordWithReadback(this.stepDispatches(), true, readback), readback };
  }

  private recordWithReadback(dispatches: Dispatch[], withNorm: boolean, readback: GPUBuffer): GPUCommandBuffer {
    const { rt, model } = this;
    const scaled = this.plan.lossScaling;
    return rt.record(dispatches, (enc) => {
      enc.copyBufferToBuffer(model.b('loss'), 0, readback, 0, 4);
      if (withNorm && scaled) {
        // The unscaled norm (state word 0, non-finite on a skipped step), the scale and the skipped count (words 3, 5).
        enc.copyBufferToBuffer(model.b('lossScale'), 0, readback, 4, 4);
        enc.copyBufferToBuffer(model.b('lossScale'), 12, readback, 8, 4);
        enc.copyBufferToBuffer(model.b('lossScale'), 20, readback, 12, 4);
      } else if (withNorm) enc.copyBufferToBuffer(model.b('gradNorm'), 0, readback, 4, 4);
    });
  }

  /**
   * The loss and grad norm a submitted command buffer copied into `readback`, once the GPU is done
   * with it; with loss scaling also the scale after the step and the skipped steps so far.
   */
  private async read(readback: GPUBuffer): Promise<[number, number, number, number]> {
    await readback.mapAsync(GPUMapMode.READ);
    const bytes = readback.getMappedRange().slice(0, 16);
    readback.unmap();
    const f = new Float32Array(bytes);
    return [f[0], f[1], f[2], new Uint32Array(bytes)[3]];
  }

  /** Mean validation loss over `evalBatches` fixed batches. */
  async evaluate(): Promise<number> {
    await this.settle();
    const { opts, model } = this;
    let sum = 0;
    const batches = this.data.valBatches(opts.evalBatches, opts.batch, opts.seq);
    // Evaluation sees the model without dropout (PEFT's eval mode); training steps turn it back on.
    model.lora?.setDropoutActive(false);
    try {
      for (const b of batches) {
        model.setBatch(b);
        const [loss] = await this.runAndRead(model.lossForward, false);
        sum += loss;
      }
    } finally {
      model.lora?.setDropoutActive(true);
    }
    return sum / batches.length;
  }

  /**
   * ‖x − x̂‖/‖x‖ per layer and kind of every tensor the scheme quantizes in the forward pass, on the
   * first validation batch (one extra forward; probe.ts). Empty when nothing is quantized there.
   */
  async quantErrors(): Promise<QuantErrorRecord[]> {
    if (!this.probe) return [];
    await this.settle();
    const { opts } = this;
    this.model.setBatch(this.data.valBatches(1, opts.batch, opts.seq)[0]);
    this.rt.run(this.probe.forward);
    return this.probe.read();
  }

  /**
   * Samples up to `maxNew` tokens after `prompt` (temperature 0 = greedy) with the decoder; stops
   * early when the context (seq) is full or at the end-of-text token. A prompt longer than the context keeps its last tokens.
   */
  async sample(prompt: string, maxNew: number, temperature = 1, seed = 0): Promise<string> {
    await this.settle();
    const o = { maxTokens: maxNew, temperature, topK: 0, topP: 1, seed };
    if (this.decoder) return (await streamText(this.decoder, this.tokenizer, prompt, o, () => {})).text;
    // QLoRA: the dequantized base with the adapters merged in, on the GPU only while sampling.
    const merged = mergeLora(this.opts.model, this.opts.lora!, await this.parameters(), await this.adapters());
    const d = this.rt.mem.withOwner(this.id, () => Decoder.withParams(this.rt, this.opts.model, merged, this.opts.seq));
    try {
      return (await streamText(d, this.tokenizer, prompt, o, () => {})).text;
    } finally {
      d.destroy();
    }
  }

  async checkpoint(): Promise<CheckpointFiles> {
    const { model } = this;
    const { weights: w, m, v, lossScale } = await this.trainingState();
    // w, m, v are the trainable tensors': with LoRA the adapters', the frozen base read beside them.
    const t = model.trainable.layout;
    const lora = model.plan.lora ? { params: await this.parameters(), adapters: unflatten(w, t) } : { params: unflatten(w, t) };
    return runCheckpoint(this.opts, this.tokenizer, this.stepCount, { ...lora, m: unflatten(m, t), v: unflatten(v, t), lossScale });
  }

  /** The model's parameters (with LoRA: the frozen base; `adapters()` has the adapters). */
  async parameters(): Promise<Map<string, Float32Array>> {
    await this.settle();
    return unflatten(await this.model.readFlat('weights'), this.model.layout);
  }

  /** The LoRA adapters as trained so far (names as engine/lora/spec.ts); throws for a run without LoRA. */
  async adapters(): Promise<Map<string, Float32Array>> {
    if (!this.model.plan.lora) throw new Error('this run trains no LoRA adapters');
    await this.settle();
    return unflatten(await this.model.readTrainable('weights'), this.model.trainable.layout);
  }

  /** The kernel each layer's GEMMs run: 'fp32', 'int8-dot4' or 'int8-tensor-core' per forward, dX, dW. */
  computePaths(): LayerPaths[] {
    return this.model.computePaths();
  }

  /** The INT8 dW GEMMs that run split over K (label → slices). */
  gemmSplits(): ReadonlyMap<string, number> {
    return this.model.gemmSplits();
  }

  /** This run's allocated bytes per category (the ledger, not a formula). */
  memory(): MemReport {
    return this.rt.mem.report(this.id);
  }

  destroy(): void {
    this.recordedStep = undefined; // references the model's buffers; never submitted now
    this.ahead = undefined;
    this.probe?.destroy();
    this.decoder?.destroy();
    this.model.destroy();
  }
}
