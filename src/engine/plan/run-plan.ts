/**
 * The model's plan: (scheme, model config, batch, context, parallel layout) → one RunPlan, made by
 * the run's resolver (train-plan.ts: resolveTrainingPlan, which hands it down inside its TrainingPlan).
 * Every reader of a scheme takes its answer from here instead of interpreting the scheme itself:
 * the model (llama.ts: which buffers exist, which GEMM operands are fake-quantized, how saved
 * activations and gradients are stored), the memory plan and ledger (`buffers`: the model allocates
 * exactly this list and `--plan` sums it, so prediction and allocation agree by construction), the
 * budget allocator (budget.ts), the probes (train/probe.ts), the bit accounting
 * (train/probe-bits.ts) and the peers (the data- and tensor-parallel wire formats).
 */
import { BUFFER_USAGE } from '../gpu/memory';
import { attentionBackwardWorkspaceBytes } from '../kernels/attention/attention';
import { crossEntropyWorkspaceBytes } from '../kernels/crossentropy/crossentropy';
import { embeddingWorkspaceBytes } from '../kernels/embedding/embedding';
import { globalNormPartialsBytes } from '../kernels/reduce/reduce';
import { rmsnormWorkspaceBytes } from '../kernels/rmsnorm/rmsnorm';
import { ADAMW_STEP_BYTES } from '../optim/adamw';
import { LOSS_SCALE_DEFAULTS, LossScaler } from '../optim/loss-scale';
import { LOSS_SCALE_STATE_BYTES } from '../optim/loss-scale-gpu';
import { SCHEME_PRESETS } from '../scheme/presets';
import { isFp32, layerScheme, type QuantSpec, SAVED_KINDS, type SavedKind, type SavedSpec, savedSpec, type Scheme } from '../scheme/scheme';
import { type GradWire, gradWireOf } from '../scheme/wire';
import { type TpConfig, tpBufferPlan } from '../model/tp/tp';
import { tpPeerBufferPlan } from '../model/tp/peer';
import {
  computeErrors, f16AttentionPath, type F16Features, type F16Resolution, f16GemmPath, GEMM_INPUT_SAVED, type GemmInputSaved, gateUpDxFused, int8Buffers, int8Use,
  type LayerCompute, layerCompute, type LayerF16Paths, layerF16Paths, sharesInputCodes, usesF16,
} from '../model/compute-plan';
import type { ModelConfig } from '../model/config';
import { type BufferSpec, type ModelDims, modelDims } from '../model/dims';
import { type ParamLayout, paramLayout } from '../model/params';
import { f16AttnInputSlots, f16AttnQkvSlots, f16CellBytes, f16Cells, f16GateInA, f16Lean, f16LiveAlias, type F16OnlyKey, f16OnlyOutputs, f16Operands, f16SwigluBwdStored, f16SwigluStored, runsF16 } from '../model/f16-operands';
import { logitsChunkRows } from './logits';
import { type LoraPlan, loraBuffers, resolveLoraPlan } from '../lora/plan';
import type { LoraSpec, LoraTarget } from '../lora/spec';
import { qloraBuffers, type QloraPlan, type QloraSpec, resolveQloraPlan } from '../lora/qlora/plan';
import { weightCodesBuffers, type WeightCodesMode, type WeightCodesPlan, weightCodesPlan } from '../model/weight-codes';
import {
  type ActivationStorage, CHECKPOINT_KEPT, FINAL_SAVED, isHalf, gradStorage, LAYER_SAVED, SAVED_KIND_OF, type LayerSavedKey, layerSizes, layerStorage, linearsTransposed, LIVE_ALIAS, liveKey,
  type PlanOptions, type SavedStorage, savedKey, swigluBlockRows,
} from '../model/plan';

export interface LayerPlan {
  /** The GEMM operands as the GEMMs see them (fp32 = as is; else a fake-quantized copy). */
  weights: QuantSpec;
  gemmInputs: QuantSpec;
  gemmOutputGrads: QuantSpec;
  /** What the linear layers' forward, dX and dW GEMMs compute in (compute-plan.ts). */
  compute: LayerCompute;
  /** The layer's cell per saved kind (fp32 where the scheme sets none). */
  savedSpecs: Record<SavedKind, SavedSpec>;
}

export interface RunPlan {
  cfg: ModelConfig;
  dims: ModelDims;
  layout: ParamLayout;
  scheme: Scheme;
  training: boolean;
  layers: LayerPlan[];
  /** Storage of the saved tensors of layer l (index L: the final norm's, priced by the last layer's cells); absent = fp32. Only training saves. */
  saved: Partial<Record<LayerSavedKey, ActivationStorage>>[];
  /** Quantized gradient storage per tensor, or null for one fp32 flat buffer. */
  grads: Map<string, SavedStorage> | null;
  adam: { m: QuantSpec; v: QuantSpec };
  /** Which INT8 GEMMs some layer runs: per-row operands (forward, dX) and blocked ones (dW). */
  int8: { rows: boolean; dw: boolean };
  /**
   * When the INT8 GEMMs' weight codes are made (the scheme's weight_codes; 'per-gemm' where no
   * forward or dX GEMM is INT8), and with 'per-step' which ones the step keeps and where.
   */
  weightCodes: WeightCodesMode;
  wcodes: WeightCodesPlan | null;
  /** Per layer: gate_proj's and up_proj's dX run as one INT8 GEMM over K = 2F, dY's codes from the SwiGLU backward (gateUpDxFused). */
  gateUpDx: boolean[];
  /**
   * Per layer: the saved tensors whose storage codes are also the forward INT8 GEMM's X codes
   * (sharesInputCodes): the producer (or the storage quantizer, for o) writes them once into the
   * storage, the GEMM reads them from there, and no copy goes to i8.a.
   */
  sharedCodes: Set<GemmInputSaved>[];
  /**
   * Per layer: the saved tensors whose f16 cell is also the f16 GEMMs' or attention's operand copy
   * (model/f16-operands.ts f16Cells): written once by the producer in the operand layout, read by the
   * f16 consumers in place; the fp32 readers unpack it (the twin: copy its f32 elements).
   */
  f16Cells: Set<LayerSavedKey>[];
  /**
   * The live copies kept in scratch instead of buffers of their own: of f16 cells (f16-operands.ts
   * f16LiveAlias), and gate's in a lean plan (f16GateInA: f16.a); model/plan.ts LIVE_ALIAS for the rest.
   */
  f16Live: Partial<Record<LayerSavedKey, string>>;
  /**
   * A lean f16 workspace (f16-operands.ts f16Lean): the f16 GEMMs cast each weight into f16.w just before
   * they run instead of keeping every weight's f16 copy, and gate's live copy is f16.a where f16GateInA.
   */
  f16Lean: boolean;
  /** The fake-quantized copies the step keeps: of the weights (`wq`), GEMM inputs (`aq`), output gradients (`gq`). */
  fakeQuant: { weights: boolean; inputs: boolean; grads: boolean };
  /** Rows per block of the SwiGLU backward (swigluBlockRows; N when `up` is stored fp32). */
  swigluRows: number;
  /**
   * Per layer: the SwiGLU writes gate's and up's f16 storage in its forward and reads it in its backward
   * (f16-operands.ts f16SwigluStored): no packs, no unpacks, no blocks of rows (nor their `swigluBlock`).
   */
  swigluHalf: boolean[];
  /** Per layer: the SwiGLU backward reads gate's and up's f16 storage whole and writes dgate, dup in fp32 too (f16-operands.ts f16SwigluBwdStored). */
  swigluBwdHalf: boolean[];
  /** Per layer: the outputs nothing reads in fp32, whose producers write their f16 copy alone (f16-operands.ts f16OnlyOutputs). */
  f16Only: Set<F16OnlyKey>[];
  /**
   * Token rows of logits that exist at once (plan/logits.ts logitsChunkRows; N = the whole batch):
   * the LM head, its loss and its backward run a chunk of this many rows at a time (model/lm-head.ts).
   */
  logitsRows: number;
  wire: {
    /** Data parallel over `members` peers: the gradient all-reduce's format (null: the scheme's grads.wire has no all-reduce). */
    dp: { members: number; format: GradWire | null };
    /** Tensor parallel's degree and exchange format; null without TP. */
    tp: TpConfig | null;
    /** This model's rank in a real tensor-parallel group; undefined: TP is simulated on this device. */
    tpRank?: number;
  };
  /** false: the weights belong to another model (the model binds them instead of allocating `weights`). */
  ownWeights: boolean;
  /** Tests' override of the fewest tokens for which the forward linears run NN on a transposed weight (LINEAR_NN_MIN_ROWS). */
  linearNnMinRows?: number;
  /** Every buffer the model allocates, in bytes. */
  buffers: BufferSpec[];
  /**
   * Where some layer asks for f16 compute: the path its f16 GEMMs take on this device (fp32 with the
   * reasons where they cannot run f16), per layer, and whether dynamic loss scaling is on (the scheme
   * asks for it and some GEMM runs f16: fp32 gradients need none). null: no f16 in the scheme.
   */
  f16: { resolution: F16Resolution; layers: LayerF16Paths[]; lossScaling: boolean } | null;
  /**
   * Dynamic loss scaling's configuration when the training step scales (f16.lossScaling, or forced
   * by ResolveOptions.lossScale.always on any plan), else null: the model then keeps the scaler's
   * state in `lossScale` and the optimizer skips steps with inf/NaN gradients.
   */
  lossScale: LossScaleConfig | null;
  /**
   * Tests on a device without shader-f16: the f16 GEMMs run their f32 twins (f32 storage holding
   * f16-rounded values, the SIMT kernel), so the model's f16 branch runs on SwiftShader.
   */
  f16Twin?: boolean;
  /**
   * LoRA adapters (engine/lora): the base model is frozen — no gradients, optimizer state or dW
   * GEMMs of its own — and only the adapters train (lora.* buffers). null: every parameter trains.
   */
  lora: LoraPlan | null;
  /**
   * QLoRA (lora/qlora): the frozen base's block linears are INT4/INT8 codes only; `weights` holds the
   * rest in qlora.dense's layout (`layout` stays the full model's, the layout of uploads and reads). null: fp32 base.
   */
  qlora: QloraPlan | null;
  /**
   * Activation checkpointing: each layer saves only its input; the backward re-runs layer l's forward
   * into one shared set of the other saved tensors (model/plan.ts savedKey) before layer l's backward.
   */
  checkpoint: boolean;
}

/** GradScaler's constructor arguments as the plan resolves them (optim/loss-scale.ts LossScalerOptions). */
export interface LossScaleConfig {
  initScale: number;
  growthFactor: number;
  backoffFactor: number;
  growthInterval: number;
}

export interface LossScaleOptions extends Partial<LossScaleConfig> {
  /** Scale even where no GEMM runs f16 (an fp32 plan): the scaler's behaviour on any device, tests and comparisons. */
  always?: boolean;
}

export interface ResolveOptions extends PlanOptions {
  /** Data-parallel members the wire figures are for (1: a single device). */
  dpMembers?: number;
  /** The device's f16 features (null or absent: unknown, so f16 GEMMs resolve to fp32 and say why). */
  f16Device?: F16Features | null;
  /** Loss scaling's configuration (GradScaler's defaults where absent), and `always` to scale without f16. */
  lossScale?: LossScaleOptions;
  /** RunPlan.f16Twin (tests). */
  f16Twin?: boolean;
  /** Train LoRA adapters over a frozen base (RunPlan.lora). */
  lora?: LoraSpec;
  /** ... over a base quantized so (RunPlan.qlora; needs lora). */
  qlora?: QloraSpec;
  /** Recompute each layer's activations in the backward instead of saving them (RunPlan.checkpoint; training only). */
  checkpointActivations?: boolean;
}

/**
 * Why activation checkpointing cannot run under this scheme, or null. The re-run forward must write
 * exactly what the first one did, into buffers nothing else holds at that point of the backward.
 */
/**
 * A layer's storage under checkpointing: its recomputed tensors are not saved, so their bf16/f16 cells
 * (mixed precision's half-precision storage, the f16 preset) do not apply and they live in the fp32
 * shared set; quantized cells and a stored input stay, for checkpointProblem to refuse.
 */
function checkpointStorage(st: RunPlan['saved'][number]): RunPlan['saved'][number] {
  return Object.fromEntries(Object.entries(st).filter(([k, v]) => CHECKPOINT_KEPT.includes(k as LayerSavedKey) || !isHalf(v)));
}

function checkpointProblem(scheme: Scheme, layers: LayerPlan[], saved: RunPlan['saved']): string | null {
  const why = (s: string) => `activation checkpointing: ${s}`;
  if (scheme.tp.degree > 1) return why(`scheme '${scheme.name}' splits the model over ${scheme.tp.degree} peers (tensor parallelism), whose layer exchanges the re-run would repeat; train it without --checkpoint-activations`);
  for (const [l, ly] of layers.entries()) {
    const stored = Object.entries(saved[l]).map(([k, st]) => `${k} (${st!.format})`);
    if (stored.length) return why(`scheme '${scheme.name}' stores layer ${l}'s saved activations ${stored.join(', ')} quantized (or its input 16-bit); checkpointing keeps only each layer's input, in fp32, and recomputes the rest — use fp32 saved cells (layer.saved) with it`);
    const c = ly.compute;
    if (c.forward === 'int8' || c.dx === 'int8' || c.dw === 'int8' || c.attentionQk === 'int8' || c.attentionDp === 'int8') {
      return why(`scheme '${scheme.name}' runs layer ${l}'s GEMMs in INT8, whose operand codes (i8.a) hold the backward's dY between layers and would be overwritten by the re-run forward; use fp32 or f16 compute with it`);
    }
    if (!isFp32(ly.gemmInputs)) return why(`scheme '${scheme.name}' fake-quantizes layer ${l}'s GEMM inputs (gemm_inputs), whose copies and probes the re-run forward would make again; use fp32 gemm_inputs with it`);
  }
  return null;
}

/**
 * Why a frozen base cannot run quantized under these layers, or null: its GEMMs dequantize the codes
 * into fp32 (the weight-only kernels) or f16 (the f16 GEMMs), never into INT8 operands.
 */
function qloraProblem(scheme: Scheme, layers: LayerPlan[]): string | null {
  for (const [l, ly] of layers.entries()) {
    if (ly.compute.forward !== 'fp32' || ly.compute.dx !== 'fp32') {
      return `QLoRA runs the quantized base's GEMMs in fp32 or f16 from its dequantized codes; scheme '${scheme.name}' asks layer ${l} for INT8 forward/dX compute`;
    }
    if (!isFp32(ly.weights)) return `QLoRA stores the base quantized already; scheme '${scheme.name}' also fake-quantizes layer ${l}'s weights`;
  }
  return null;
}

/** A frozen base runs no dW GEMM: its layers' dW compute is moot (fp32, no f16 or INT8 dW buffers). */
function freezeBase(layers: LayerPlan[]): LayerPlan[] {
  return layers.map((l) => ({ ...l, compute: { ...l.compute, dw: 'fp32', ...(l.compute.f16 ? { f16: { ...l.compute.f16, dw: false } } : {}) } }));
}

function resolveLossScale(training: boolean, f16: RunPlan['f16'], o: LossScaleOptions | undefined): LossScaleConfig | null {
  if (!training || !(f16?.lossScaling || o?.always)) return null;
  const c: LossScaleConfig = {
    initScale: o?.initScale ?? LOSS_SCALE_DEFAULTS.initScale,
    growthFactor: o?.growthFactor ?? LOSS_SCALE_DEFAULTS.growthFactor,
    backoffFactor: o?.backoffFactor ?? LOSS_SCALE_DEFAULTS.backoffFactor,
    growthInterval: o?.growthInterval ?? LOSS_SCALE_DEFAULTS.growthInterval,
  };
  // The LossScaler checks what a state may hold (throws with the field's name).
  new LossScaler(c);
  return c;
}

function resolveF16(scheme: Scheme, layers: LayerPlan[], training: boolean, dev: F16Features | null, D: number): RunPlan['f16'] {
  if (!layers.some((l) => usesF16(l.compute))) return null;
  const resolution = f16GemmPath(dev, { tp: scheme.tp.degree > 1 });
  const paths = layerF16Paths(layers, training, resolution, f16AttentionPath(dev, D));
  const runsF16 = paths.some((p) => [p.forward, p.dx, p.dw].some((g) => g !== null && g !== 'fp32'));
  return { resolution, layers: paths, lossScaling: training && scheme.loss_scaling === 'dynamic' && runsF16 };
}

function planLayers(scheme: Scheme, L: number): LayerPlan[] {
  return Array.from({ length: L }, (_, l) => {
    const ls = layerScheme(scheme, l);
    const savedSpecs = Object.fromEntries(SAVED_KINDS.map((k) => [k, savedSpec(scheme, l, k)])) as Record<SavedKind, SavedSpec>;
    return { weights: ls.weights, gemmInputs: ls.gemm_inputs, gemmOutputGrads: ls.gemm_output_grads, compute: layerCompute(ls.compute), savedSpecs };
  });
}

function computeProblemOf(scheme: Scheme, dims: ModelDims, layers: LayerPlan[], training: boolean): string | null {
  const problems = computeErrors(scheme, dims, layers, training);
  return problems.length ? `scheme '${scheme.name}': compute formats this model cannot run:\n  ${problems.join('\n  ')}` : null;
}

/** Why resolvePlan would refuse the scheme's compute formats at this shape (its message), or null: the page checks before Start. */
export function computeProblem(cfg: ModelConfig, B: number, T: number, scheme: Scheme | undefined, training = true): string | null {
  if (!scheme) return null;
  const dims = modelDims(cfg, B, T);
  return computeProblemOf(scheme, dims, planLayers(scheme, dims.L), training);
}

/** The one place a scheme is interpreted: everything a training (or forward-only) model of this shape does under it. */
export function resolvePlan(cfg: ModelConfig, B: number, T: number, opts: ResolveOptions = {}): RunPlan {
  const training = opts.training ?? true;
  const scheme = opts.scheme ?? SCHEME_PRESETS.fp32;
  const dims = modelDims(cfg, B, T);
  const layout = paramLayout(cfg);
  const lora = opts.lora ? resolveLoraPlan(cfg, opts.lora) : null;
  if (lora && scheme.tp.degree > 1) throw new Error('LoRA adapters with tensor parallelism are not supported (train them on one device, or data-parallel)');
  const layers = lora ? freezeBase(planLayers(scheme, dims.L)) : planLayers(scheme, dims.L);
  if (opts.qlora && !lora) throw new Error('QLoRA quantizes a frozen base: it goes with LoRA adapters');
  // Another model's weights are fp32 in the full layout; a QLoRA model's `weights` hold the dense tensors only.
  if (opts.qlora && opts.ownWeights === false) throw new Error('a QLoRA model cannot bind another model\'s weights');
  const qlora = opts.qlora ? resolveQloraPlan(cfg, opts.qlora) : null;
  const qProblem = qlora ? qloraProblem(scheme, layers) : null;
  if (qProblem) throw new Error(qProblem);
  const problem = computeProblemOf(scheme, dims, layers, training);
  if (problem) throw new Error(problem);
  // A forward-only model saves nothing, so has nothing to recompute.
  const checkpoint = training && !!opts.checkpointActivations;
  const saved = Array.from({ length: dims.L + 1 }, (_, l) => {
    const st = layerStorage(dims, training ? scheme : undefined, l);
    return checkpoint && l < dims.L ? checkpointStorage(st) : st;
  });
  const ckProblem = checkpoint ? checkpointProblem(scheme, layers, saved) : null;
  if (ckProblem) throw new Error(ckProblem);
  const fakeQuant = {
    weights: layers.some((l) => !isFp32(l.weights)),
    inputs: layers.some((l) => !isFp32(l.gemmInputs)),
    // gemm_output_grads fake-quantizes dY on the dW path, which a frozen base does not run.
    grads: training && !lora && layers.some((l) => !isFp32(l.gemmOutputGrads)),
  };
  const int8 = int8Use(layers, training);
  const gateUpDx = layers.map((l) => (opts.fuseGateUpDx ?? true) && gateUpDxFused(dims, l.compute, training));
  const weightCodes = int8.rows ? scheme.weight_codes : 'per-gemm';
  const f16 = resolveF16(scheme, layers, training, opts.f16Device ?? null, dims.D);
  // Not under tensor parallelism (its layers' GEMMs run fp32; its exchanges own their scratch).
  const swigluRows = saved.some((s) => s.up) ? swigluBlockRows(dims, saved, opts.swigluBlockRows) : dims.N;
  const lean = opts.f16Lean ?? f16Lean(saved);
  // A training plan whose layers' tensors are read by nothing but the step itself (no LoRA adapters, TP exchanges or checkpointing re-run).
  const plain = training && !checkpoint && !lora && scheme.tp.degree <= 1;
  // ... where LoRA's adapters may read f16 cells in place of fp32 x (no dropout: LoraGemms.readsCells), so the
  // f16-only producers apply to their inputs too; per layer, whether an adapter on q/k (gate/up) reads dY in fp32.
  const direct = training && !checkpoint && scheme.tp.degree <= 1 && (!lora || lora.spec.dropout === 0);
  const loraDy = (ts: readonly LoraTarget[]) => layers.map((_, l) => !!lora?.adapters.some((a) => a.layer === l && ts.includes(a.target)));
  const cells = (opts.shareF16 ?? true) && scheme.tp.degree <= 1 ? f16Cells(saved.slice(0, dims.L), f16?.layers, training, layers.map((ly) => ly.compute.attentionQk === 'int8')) : layers.map(() => new Set<LayerSavedKey>());
  const f16Live: RunPlan['f16Live'] = {
    ...f16LiveAlias(dims, saved, cells, f16?.layers),
    ...(f16GateInA(dims, saved, f16?.layers, {
      lean, swigluRows, ops: f16Operands(f16?.layers, layout, dims, opts.f16Twin, training, cells, lean),
      plain: plain && !gateUpDx.some((x) => x),
    }) ? { gate: 'f16.a' } : {}),
  };
  const halfSwiglu = opts.swigluHalf ?? true;
  const swigluHalf = halfSwiglu ? f16SwigluStored(saved, f16?.layers, cells, gateUpDx, direct, !!lora) : layers.map(() => false);
  const plan: RunPlan = {
    cfg, dims, layout, scheme, training, layers, saved,
    // A frozen base has no gradients to store (the adapters' are fp32).
    grads: training && !lora ? gradStorage(layout, scheme) : null,
    adam: { m: scheme.adam.m, v: scheme.adam.v },
    int8,
    weightCodes,
    wcodes: weightCodesPlan(weightCodes, dims, layout, layers, training, gateUpDx),
    gateUpDx,
    sharedCodes: layers.map((ly, l) => new Set((opts.shareCodes ?? true)
      ? GEMM_INPUT_SAVED.filter((k) => sharesInputCodes(ly.compute, saved[l][k], ly.savedSpecs[SAVED_KIND_OF[k]!]))
      : [])),
    f16Cells: cells,
    f16Live,
    f16Lean: lean,
    f16Only: (opts.f16Only ?? true) ? f16OnlyOutputs(f16?.layers, cells, f16Live, direct, loraDy(['q', 'k']), !!lora) : cells.map(() => new Set()),
    swigluBwdHalf: halfSwiglu ? f16SwigluBwdStored(saved, f16?.layers, gateUpDx, swigluHalf, f16Live.gate === 'f16.a', training, loraDy(['gate', 'up'])) : layers.map(() => false),
    fakeQuant,
    swigluRows,
    swigluHalf,
    // A trained head's dW reads hF back from its storage a chunk of rows at a time: its rows must align there too.
    logitsRows: logitsChunkRows(dims, training && !lora ? saved[dims.L].hF : undefined, opts.logitsChunkRows),
    wire: {
      dp: { members: opts.dpMembers ?? 1, format: gradWireOf(scheme.grads.wire) },
      tp: scheme.tp.degree > 1 ? { degree: scheme.tp.degree, codec: scheme.tp.codec, group: scheme.tp.group } : null,
      tpRank: opts.tpRank,
    },
    ownWeights: opts.ownWeights ?? true,
    linearNnMinRows: opts.linearNnMinRows,
    buffers: [],
    f16,
    lossScale: resolveLossScale(training, f16, opts.lossScale),
    ...(opts.f16Twin ? { f16Twin: true } : {}),
    lora,
    qlora,
    checkpoint,
  };
  plan.buffers = planBuffers(plan, opts);
  return plan;
}

/** Every buffer the training step allocates, in bytes. The single source for allocation and `--plan`. */
export function modelBufferPlan(cfg: ModelConfig, B: number, T: number, opts: PlanOptions = {}): BufferSpec[] {
  return resolvePlan(cfg, B, T, opts).buffers;
}

function planBuffers(p: RunPlan, opts: PlanOptions): BufferSpec[] {
  const { training, layout, dims: d, cfg } = p;
  const f = 4;
  const P = layout.totalFloats * f;
  const out: BufferSpec[] = [];
  // QLoRA: `weights` holds the dense tensors only, the block linears their codes and scales.
  if (opts.ownWeights ?? true) out.push({ key: 'weights', category: 'weights', bytes: p.qlora ? p.qlora.dense.totalFloats * f : P });
  if (p.qlora) out.push(...qloraBuffers(p.qlora));
  const gradStore = p.grads;
  const frozen = !!p.lora;
  if (p.lora) out.push(...loraBuffers(p.lora, d, training));
  if (training && !frozen) {
    if (!gradStore) out.push({ key: 'grads', category: 'grads', bytes: P });
    else {
      // AGoQ's 8-bit gradient storage: codes + scales per tensor; each gradient is produced in fp32
      // into a stage the size of the largest tensor and quantized right away.
      for (const [name, st] of gradStore) {
        out.push({ key: `grads.codes.${name}`, category: 'grads', bytes: st.words * 4 });
        out.push({ key: `grads.scales.${name}`, category: 'grads', bytes: st.scales * 4 });
      }
      out.push({ key: 'gradStage', category: 'workspace', bytes: Math.max(...layout.views.map((v) => v.size)) * 4 });
      // Tied embeddings collect lm_head's and the embedding's gradient across the whole backward.
      if (cfg.tie_word_embeddings) out.push({ key: 'gradEmbed', category: 'workspace', bytes: d.V * d.C * 4 });
    }
    out.push({ key: 'adam.m', category: 'optimizer', bytes: P }, { key: 'adam.v', category: 'optimizer', bytes: P });
  }
  const act = (key: string, floats: number) => out.push({ key, category: 'activations', bytes: floats * f });
  const ws = (key: string, bytes: number) => out.push({ key, category: 'workspace', bytes });
  act('ids', d.N);
  const sizes = layerSizes(d);
  const live = new Set<LayerSavedKey>();
  for (let l = 0; l <= d.L; l++) {
    const st = p.saved[l];
    for (const k of l < d.L ? LAYER_SAVED : FINAL_SAVED) {
      const q = st[k];
      if (!q) {
        // Under checkpointing the layers' shared set is allocated once (with layer 0's).
        const key = savedKey(l, k, d.L, p.checkpoint);
        if (l === 0 || key === `L${l}.${k}`) act(key, sizes[k][0]);
        continue;
      }
      // Quantized (or bf16/f16) storage: codes and scales are what stays alive for backward; bf16/f16 have no scales.
      // An f16 cell that is an operand copy takes the operand layout (f16CellBytes).
      const cell = l < d.L && p.f16Cells[l].has(k);
      out.push({ key: `L${l}.${k}.codes`, category: 'activations', bytes: cell ? f16CellBytes(d, k, q.n, !!p.f16Twin) : q.words * 4 });
      if (q.scales) out.push({ key: `L${l}.${k}.scales`, category: 'activations', bytes: q.scales * 4 });
      live.add(k);
    }
  }
  // One fp32 working copy per quantized kind, shared by all layers: forward writes it before
  // quantizing, backward dequantizes into it before the consumers read it.
  for (const k of live) if (!LIVE_ALIAS[k] && !p.f16Live[k]) ws(liveKey(k), sizes[k][0] * f);
  if (p.saved.some((st, l) => st.up && !p.swigluHalf[l] && !p.swigluBwdHalf[l])) ws('swigluBlock', p.swigluRows * d.F * f);
  act('rstdF', d.N);
  act('logits', p.logitsRows * d.V); // one chunk's (model/lm-head.ts); becomes its dlogits in place
  ws('targets', d.N * f);
  // qRaw and dq also hold [N, C] live copies (LIVE_ALIAS), wider than q in a tensor-parallel shard.
  ws('qRaw', d.N * Math.max(d.C, d.QC) * f);
  ws('kRaw', d.N * d.KVC * f);
  // f16 GEMMs' operands: the weights' f16 copy and the cast activations (model/f16-operands.ts).
  // QLoRA's block linears have no f16 copy: each is dequantized to f16 into qlora.w before its GEMM.
  const f16 = f16Operands(p.f16?.layers, p.qlora?.dense ?? layout, d, p.f16Twin, training, p.f16Cells, p.f16Lean);
  if (f16) {
    if (!p.qlora) ws('f16.w', f16.weightBytes);
    // Where gate's fp32 live copy is f16.a (f16GateInA), at least [N, F] fp32 (its dY slots' size already on a device).
    ws('f16.a', Math.max(f16.actBytes, p.f16Live.gate === 'f16.a' ? d.N * d.F * f : 0));
    if (f16.dw && training) ws('f16.x', f16.xBytes);
  }
  // The f16 attention's q, k, v (and the backward's dO) copies (model/f16-operands.ts f16AttnInputSlots), where some layer runs it:
  // q, k, v's only where a layer has no f16 cells of them.
  const f16Bwd = training && !!p.f16?.layers.some((l) => l.attentionBackward === 'f16-tensor-core');
  const qkvSlots = f16AttnQkvSlots(p.f16?.layers, p.f16Cells);
  if (qkvSlots || f16Bwd) ws('f16.qkv', f16AttnInputSlots(d, p.f16Twin, f16Bwd, qkvSlots).bytes);
  // The forward GEMMs' weight, transposed to [in, out] just before each (llama.ts, linear()); INT8 and f16 forwards read W's codes or f16 copy.
  const fp32Forward = !p.qlora && p.layers.some((l, i) => l.compute.forward === 'fp32' && !runsF16(p.f16?.layers[i]?.forward));
  if (fp32Forward && linearsTransposed(d.N, opts.linearNnMinRows)) ws('wT', d.C * Math.max(d.QC, d.KVC, d.F) * f);
  out.push(...int8Buffers(d, p.layers, training, p.gateUpDx, p.sharedCodes, p.wcodes !== null));
  out.push(...weightCodesBuffers(p.wcodes));
  ws('losses', d.N * f);
  ws('loss', 16);
  ws('ceWs', crossEntropyWorkspaceBytes());
  // Loss and gradient norm come back through these small mappable buffers once per step: even
  // steps through the first, odd through the second (a step submitted before the last one's loss is
  // read copies into the one not being mapped; trainer.ts trainStep).
  out.push({ key: 'readback', category: 'workspace', bytes: 16, usage: BUFFER_USAGE.MAP_READ | BUFFER_USAGE.COPY_DST });
  out.push({ key: 'readbackOdd', category: 'workspace', bytes: 16, usage: BUFFER_USAGE.MAP_READ | BUFFER_USAGE.COPY_DST });
  ws('rope', 2 * d.T * (d.D / 2) * f);
  const tp = p.wire.tp;
  if (tp) out.push(...(p.wire.tpRank === undefined ? tpBufferPlan(d, tp) : tpPeerBufferPlan(d, tp, training ? layout : null)));
  // The quantized pre-training study's fake quantization: a quantized copy of the weights for the
  // GEMMs (master weights stay fp32), of each GEMM input, and of each output gradient on the dW path.
  if (p.fakeQuant.weights) ws('wq', P);
  if (p.fakeQuant.inputs) ws('aq', d.N * Math.max(d.C, d.F) * f);
  if (p.fakeQuant.grads) ws('gq', d.N * Math.max(d.C, d.F) * f);
  if (training) {
    ws('dres', d.N * d.C * f);
    ws('dh', d.N * d.C * f);
    ws('dF1', d.N * d.F * f);
    ws('dq', d.N * Math.max(d.C, d.QC) * f);
    ws('dk', d.N * d.KVC * f);
    ws('dv', d.N * d.KVC * f);
    ws('attnWs', attentionBackwardWorkspaceBytes(d.B, d.T, d.nH));
    ws('normWs', rmsnormWorkspaceBytes({ N: d.N, C: d.C }));
    if (frozen) {
      // The frozen norms' weight gradients go nowhere: the RMSNorm backward writes them here.
      ws('frozenDw', d.C * f);
    } else ws('embedWs', embeddingWorkspaceBytes({ N: d.N, V: d.V }));
    const normed = p.lora ? p.lora.layout.totalFloats : layout.totalFloats;
    ws('normPartials', gradStore ? globalNormPartialsBytes(layout.views.map((v) => v.size)) : globalNormPartialsBytes(normed));
    ws('gradNorm', 16);
    // Loss scaling's state (optim/loss-scale-gpu.ts): scale, growth tracker, skipped steps, the unscaled norm.
    if (p.lossScale) ws('lossScale', LOSS_SCALE_STATE_BYTES);
    out.push({ key: 'stepParams', category: 'workspace', bytes: ADAMW_STEP_BYTES, usage: BUFFER_USAGE.UNIFORM | BUFFER_USAGE.COPY_DST });
  }
  return out;
}
