/**
 * A run resolved once: its training options (model, shape, scheme) become one deeply frozen
 * TrainingPlan that is handed to the model, the trainer, the memory plan and ledger, the probes, the
 * scheme editor and the peers. The memory budget is solved here and nowhere else, and nothing
 * downstream interprets the raw scheme again: each reads its answer off the plan.
 */
import { emptyMemReport, type MemReport, roundBufferSize } from '../gpu/memory';
import { type F16Features, usesInt8 } from '../model/compute-plan';
import { decoderBufferPlan } from '../model/decode';
import type { BufferSpec } from '../model/dims';
import { type LossScaleOptions, resolvePlan, type RunPlan } from './run-plan';
import type { TpConfig } from '../model/tp/tp';
import { shardConfig } from '../model/tp/shard';
import { SCHEME_PRESETS } from '../scheme/presets';
import type { Scheme } from '../scheme/scheme';
import type { GradWire, WireFormat } from '../scheme/wire';
import type { TrainOptions } from '../train/options';
import { quantProbeBufferPlan } from '../train/probe';
import { type BudgetChoice, resolveBudget } from './budget';

export type { BudgetChoice } from './budget';

/** What resolving reads of a run's options: the model, the step's shape and the scheme. */
export type PlanInput = Pick<TrainOptions, 'model' | 'batch' | 'seq' | 'scheme' | 'lora' | 'qlora' | 'checkpointActivations'>;

export interface TrainingPlanOptions {
  /** Data-parallel members the DP wire figures are for (1: a single device). */
  dpMembers?: number;
  /** The run is DiLoCo: the outer exchange's wire format (its inner steps exchange nothing). */
  diloco?: { wire: WireFormat } | null;
  /**
   * This plan is rank `rank` of a real tensor-parallel group of `degree` peers (the scheme's tp.degree
   * when it fits; TpTrainer checks): the model is that rank's shard (tp/shard.ts) and the plan holds
   * its buffers alone (a TP rank builds no decoder or probe).
   */
  tpShard?: { rank: number; degree: number };
  /** The device's f16 features: the f16 GEMMs' path is resolved from them (absent: unknown, fp32, said so in `f16`). */
  device?: F16Features;
  /** Loss scaling's configuration, and `always` to scale an fp32 run too (run-plan.ts LossScaleOptions). */
  lossScale?: LossScaleOptions;
  /** Tests: the f16 GEMMs' f32 twins (RunPlan.f16Twin). */
  f16Twin?: boolean;
}

export interface TrainingPlan<O extends PlanInput = TrainOptions> {
  /** The options as the run trains them: `scheme` with a memory budget's bits applied (budget_bytes gone). */
  readonly opts: O;
  /** The resolved scheme (the fp32 preset where the options name none). */
  readonly scheme: Scheme;
  /** The per-layer bits chosen for scheme.budget_bytes (null without a budget). */
  readonly budget: BudgetChoice | null;
  /** The model's plan: per-layer storage and compute formats, the GEMM operands, its buffers and their categories. */
  readonly model: RunPlan;
  /** Every buffer the run allocates: the model's, the decoder's (`decoder.*`) and the quantization probe's. */
  readonly buffers: readonly BufferSpec[];
  /** Predicted bytes per category, rounded as the allocator rounds them (what the memory ledger reports once built). */
  readonly memory: MemReport;
  /** Some layer runs an INT8 GEMM: the device's INT8 tensor-core path (and Dawn's unsafe APIs) are wanted. */
  readonly int8TensorCores: boolean;
  /** The f16 GEMMs' path per layer with the reasons where it is fp32 (model.f16; null: the scheme has no f16). */
  readonly f16: RunPlan['f16'];
  /** Dynamic loss scaling is on: the scheme asks for it and some GEMM runs f16 (or the options force it: model.lossScale). */
  readonly lossScaling: boolean;
  readonly wire: {
    /** Data parallel: the gradient all-reduce's format (the scheme's grads.wire; null: no all-reduce carries it) over `members`. */
    readonly dp: { readonly members: number; readonly format: GradWire | null };
    /** DiLoCo's outer exchange format; null when the run is not DiLoCo. */
    readonly diloco: WireFormat | null;
    /** Tensor parallel's degree and exchange format; null without TP. */
    readonly tp: TpConfig | null;
  };
}

/** Bytes per category of a buffer list, rounded as the allocator rounds each buffer. */
export function memoryOf(buffers: readonly BufferSpec[]): MemReport {
  const r = emptyMemReport();
  for (const s of buffers) {
    const bytes = roundBufferSize(s.bytes);
    r[s.category] += bytes;
    r.total += bytes;
  }
  return r;
}

/** The model's plan and every buffer a single-device run allocates under `scheme`. */
function planUnder(opts: PlanInput, scheme: Scheme | undefined, o: TrainingPlanOptions): { model: RunPlan; buffers: BufferSpec[] } {
  if (o.tpShard) {
    const model = resolvePlan(shardConfig(opts.model, o.tpShard.degree), opts.batch, opts.seq, { scheme, tpRank: o.tpShard.rank, dpMembers: o.dpMembers, f16Device: o.device, lossScale: o.lossScale, f16Twin: o.f16Twin, lora: opts.lora, qlora: opts.qlora, checkpointActivations: opts.checkpointActivations });
    return { model, buffers: model.buffers };
  }
  if (opts.lora && ((o.dpMembers ?? 1) > 1 || o.diloco)) throw new Error('LoRA adapters train on one device for now: data-parallel and DiLoCo runs exchange the full model\'s gradients');
  const model = resolvePlan(opts.model, opts.batch, opts.seq, {
    scheme, dpMembers: o.dpMembers, f16Device: o.device, lossScale: o.lossScale, f16Twin: o.f16Twin, lora: opts.lora, qlora: opts.qlora, checkpointActivations: opts.checkpointActivations,
  });
  return {
    model,
    buffers: [
      ...model.buffers,
      // A QLoRA run has no fp32 base for a standing decoder: it samples through one made on request (Trainer.sample).
      ...(model.qlora ? [] : decoderBufferPlan(opts.model, opts.seq, model.lora).map((s) => ({ ...s, key: `decoder.${s.key}` }))),
      ...quantProbeBufferPlan(model),
    ],
  };
}

/**
 * The one entry that resolves a run: solves the scheme's memory budget (AGoQ's allocation, checked
 * against the same buffer list the run allocates), then resolves the model's plan under the
 * resulting scheme, once. Throws what the run would: a budget that cannot be met, compute formats
 * this model cannot run. A TP rank's shard keeps the scheme's own cells (no budget is solved for it).
 */
export function resolveTrainingPlan<O extends PlanInput>(opts: O, o: TrainingPlanOptions = {}): TrainingPlan<O> {
  const own = structuredClone(opts);
  let budget: BudgetChoice | null = null;
  let scheme = own.scheme;
  if (scheme?.budget_bytes !== undefined && !o.tpShard) {
    const solved = resolveBudget(scheme, own.model, own.batch, own.seq, (s) => memoryOf(planUnder(own, s, o).buffers));
    scheme = solved.scheme;
    budget = solved.choice;
  }
  const { model, buffers } = planUnder(own, scheme, o);
  const plan: TrainingPlan<O> = {
    opts: { ...own, scheme },
    scheme: scheme ?? SCHEME_PRESETS.fp32,
    budget,
    model,
    buffers,
    memory: memoryOf(buffers),
    int8TensorCores: model.training && model.layers.some((l) => usesInt8(l.compute)),
    f16: model.f16,
    lossScaling: model.lossScale !== null,
    wire: { dp: model.wire.dp, diloco: o.diloco?.wire ?? null, tp: model.wire.tp },
  };
  return deepFreeze(plan);
}

/** planMemory: the predicted bytes per category of a run (the scheme editor, benchmarks and tests compare the ledger with it). */
export function planMemory(opts: PlanInput): MemReport {
  return resolveTrainingPlan(opts).memory;
}

/**
 * Freezes a plan and everything it holds (Maps' and Sets' values too; typed arrays, which cannot be
 * frozen, are left as they are): downstream code cannot change what another reader of the plan sees.
 */
function deepFreeze<T>(x: T, seen = new Set<unknown>()): T {
  if (x === null || typeof x !== 'object' || seen.has(x) || ArrayBuffer.isView(x)) return x;
  seen.add(x);
  const children = x instanceof Map ? [...x.keys(), ...x.values()] : x instanceof Set ? [...x] : Object.values(x);
  for (const v of children) deepFreeze(v, seen);
  return Object.freeze(x);
}
