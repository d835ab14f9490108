/**
 * A quantization scheme is data: for every layer and tensor kind, how it is stored or rounded.
 * fp32 is the engine as is; AGoQ, TACO and the quantized pre-training study (Chitsaz et al.) are
 * presets of this one structure, and a user can edit any cell (JSON import/export, the lab's grid).
 */
import { z } from 'zod';
import { gradWireOf } from './wire';

/** What a quantizer rounds to: every cell of a scheme takes these. */
export const QUANT_SPEC_FORMATS = ['fp32', 'int8', 'int4', 'fp8-e4m3', 'fp8-e5m2'] as const;
/** 16-bit floats (no scales, round to nearest even): they only store saved activations. */
export const HALF_FORMATS = ['bf16', 'f16'] as const;
export type HalfFormat = (typeof HALF_FORMATS)[number];
/** Every storage format. */
export const FORMATS = [...QUANT_SPEC_FORMATS, ...HALF_FORMATS] as const;
export type StoreFormat = (typeof FORMATS)[number];

export const GRANULARITIES = ['tensor', 'row', 'column', 'group'] as const;

export const HALF_ONLY_SAVED = "bf16 and f16 are storage formats for saved activations only (layer.saved.* and layers.N.saved.*): GEMM operands, gradients, Adam moments and wires take fp32, int8, int4, fp8-e4m3 or fp8-e5m2";

export const isHalfFormat = (f: string): f is HalfFormat => (HALF_FORMATS as readonly string[]).includes(f);

const SPEC_FIELDS = {
  granularity: z.enum(GRANULARITIES).default('group'),
  group: z.number().int().min(32).max(512).default(128),
  rounding: z.enum(['nearest', 'stochastic']).default('nearest'),
};

/** One quantizer: format + granularity (+ group size) + rounding. fp32 = untouched. */
export const QuantSpecSchema = z
  .object({
    format: z.enum(QUANT_SPEC_FORMATS, { error: (iss) => (typeof iss.input === 'string' && isHalfFormat(iss.input) ? HALF_ONLY_SAVED : undefined) }),
    ...SPEC_FIELDS,
  })
  .strict();
export type QuantSpec = z.infer<typeof QuantSpecSchema>;

/** A saved activation's cell: a quantizer, or bf16 / f16 (granularity and group do not apply; rounding is to nearest even). */
export const SavedSpecSchema = z
  .object({ format: z.enum(FORMATS), ...SPEC_FIELDS })
  .strict()
  .refine((q) => !isHalfFormat(q.format) || q.rounding === 'nearest', { message: 'bf16 and f16 storage round to nearest even; stochastic rounding is not implemented for them (set rounding to "nearest")', path: ['rounding'] });
export type SavedSpec = z.infer<typeof SavedSpecSchema>;

export const FP32: QuantSpec = { format: 'fp32', granularity: 'group', group: 128, rounding: 'nearest' };

/** Activations saved for backward, by kind (the AGoQ grid's columns). */
export const SAVED_KINDS = ['norm_input', 'qkv_input', 'attn_qkv', 'attn_out', 'oproj_input', 'mlp_input', 'swiglu', 'down_input', 'head_input'] as const;
export type SavedKind = (typeof SAVED_KINDS)[number];
export const SAVED_KIND_LABEL: Record<SavedKind, string> = {
  norm_input: 'norm inputs (residual stream)',
  qkv_input: 'QKV input (norm1 out)',
  attn_qkv: 'attention Q/K/V',
  attn_out: 'attention output (lse kept fp32)',
  oproj_input: 'O-proj input',
  mlp_input: 'MLP gate/up input (norm2 out)',
  swiglu: 'SwiGLU intermediate (gate, up)',
  down_input: 'down-proj input',
  head_input: 'lm_head input (final norm out; the last layer\'s cell)',
};

/**
 * The arithmetic of a GEMM: fp32, INT8 codes multiplied exactly in integers and dequantized in the
 * epilogue, or f16 operands with f32 accumulation (mixed precision; f32 master weights). Where the
 * device or the model cannot run an f16 GEMM it runs fp32, and the plan's paths say so
 * (model/compute-plan.ts f16GemmPath). Attention in f16 runs fp32 attention for now.
 */
export const COMPUTE_FORMATS = ['fp32', 'int8', 'f16'] as const;
export type ComputeFormat = (typeof COMPUTE_FORMATS)[number];

/**
 * Per linear layer, the number format of each of its three GEMMs (docs/schemes.md, "Compute formats"):
 * forward Y = X·Wᵀ (INT8: X per token, W per output channel), input gradient dX = dY·W (INT8: dY per
 * token, W per input channel) and weight gradient dW = dYᵀ·X, whose reduction runs over the tokens
 * (INT8: both operands per channel in blocks of `dw_block` tokens, Jetfire-style, or over all tokens;
 * fp32 is SwitchBack).
 */
export const ComputeSchema = z
  .object({
    forward: z.enum(COMPUTE_FORMATS).default('fp32'),
    dx: z.enum(COMPUTE_FORMATS).default('fp32'),
    dw: z.enum(COMPUTE_FORMATS).default('fp32'),
    /**
     * Tokens per scale block of the INT8 dW operands: a power of two, 32..256 (the blocked dot4
     * kernel), or 'all': one scale per channel over all the step's tokens (qgemmI8, tensor cores).
     */
    dw_block: z.union([
      z.literal('all'),
      z.number().int().min(32).max(256).refine((g) => (g & (g - 1)) === 0, 'dw_block must be a power of two'),
    ]).default(32),
    /** Rounding of the gradient operands (dY) of the INT8 dX and dW GEMMs. */
    grad_rounding: z.enum(['nearest', 'stochastic']).default('nearest'),
    /**
     * The attention scores S = Q·Kᵀ (forward and the backward's rebuilt S): fp32, or INT8 with Q and
     * K per (token, head) row after RoPE (SageAttention); softmax·V and the gradient products stay fp32.
     */
    attention_qk: z.enum(COMPUTE_FORMATS).default('fp32'),
    /**
     * The attention backward's dP = dO·Vᵀ: fp32, or INT8 with dO and V per (token, head) row, in the
     * INT8-score dK/dV kernel (needs attention_qk 'int8'); Di, dV and dK keep fp32 dO.
     */
    attention_dp: z.enum(COMPUTE_FORMATS).default('fp32'),
  })
  .strict();
export type ComputeScheme = z.infer<typeof ComputeSchema>;
export const FP32_COMPUTE: ComputeScheme = { forward: 'fp32', dx: 'fp32', dw: 'fp32', dw_block: 32, grad_rounding: 'nearest', attention_qk: 'fp32', attention_dp: 'fp32' };

export const WEIGHT_CODES = ['per-gemm', 'per-step'] as const;

export const LayerSchemeSchema = z
  .object({
    /** Weights as used by the forward GEMMs (fake-quantized copy; fp32 master weights). */
    weights: QuantSpecSchema.default(FP32),
    /** Inputs of the linear layers in the forward GEMMs (per token = row). */
    gemm_inputs: QuantSpecSchema.default(FP32),
    /** Output gradients on the weight-gradient path (dW = Q(dY)ᵀ·X). */
    gemm_output_grads: QuantSpecSchema.default(FP32),
    saved: z.partialRecord(z.enum(SAVED_KINDS), SavedSpecSchema).default({}),
    /** What the linear layers' GEMMs compute in (fp32 operands above are what they read). */
    compute: ComputeSchema.prefault({}),
  })
  .strict();
export type LayerScheme = z.infer<typeof LayerSchemeSchema>;

/**
 * A layer's own cells: only those it sets, with no defaults (`.partial()` would fill every absent
 * field with its default, and that fp32 default would override the scheme's `layer` cell).
 */
const LayerOverrideSchema = z
  .object({
    weights: QuantSpecSchema.optional(),
    gemm_inputs: QuantSpecSchema.optional(),
    gemm_output_grads: QuantSpecSchema.optional(),
    saved: z.partialRecord(z.enum(SAVED_KINDS), SavedSpecSchema).optional(),
    compute: ComputeSchema.optional(),
  })
  .strict();

export const SchemeSchema = z
  .object({
    name: z.string().min(1).max(80),
    description: z.string().max(2000).default(''),
    /** Default for every layer; `layers[i]` overrides cells of layer i. */
    layer: LayerSchemeSchema.prefault({}),
    layers: z.record(z.string().regex(/^\d+$/), LayerOverrideSchema).default({}),
    /**
     * Persistent gradient storage (per block) and what goes on the wire in data parallel: fp32, or
     * INT8 in groups of 256 with round to nearest (AGoQ's codes in the verifiable all-reduce; wire.ts).
     */
    grads: z.object({ storage: QuantSpecSchema.default(FP32), wire: QuantSpecSchema.default(FP32) }).strict().default({ storage: FP32, wire: FP32 }),
    /** Adam moments (quantized each step, updated in full precision: the study's recipe). */
    adam: z.object({ m: QuantSpecSchema.default(FP32), v: QuantSpecSchema.default(FP32) }).strict().default({ m: FP32, v: FP32 }),
    /** Tensors crossing tensor-parallel boundaries (TACO), with the (simulated) TP degree. */
    tp: z
      .object({
        degree: z.number().int().min(1).max(8).default(1),
        codec: z.enum(['fp32', 'taco', 'fp8-e4m3', 'int8']).default('fp32'),
        group: z.number().int().min(32).max(512).refine((g) => (g & (g - 1)) === 0, 'group must be a power of two').default(128),
      })
      .strict()
      .default({ degree: 1, codec: 'fp32', group: 128 }),
    /**
     * When the INT8 GEMMs' weight operands are quantized: 'per-gemm' right before each GEMM (into
     * shared scratch), 'per-step' every INT8 weight once at the start of the step into buffers kept
     * for the step (model/weight-codes.ts; the same codes, more memory, far fewer dispatches).
     */
    weight_codes: z.enum(WEIGHT_CODES).default('per-gemm'),
    /**
     * Dynamic loss scaling (torch.amp.GradScaler's rules, optim/loss-scale.ts) for f16 GEMMs' gradients:
     * 'dynamic' or 'off' (absent: off). It applies only where some GEMM runs f16 (TrainingPlan.lossScaling).
     */
    loss_scaling: z.enum(['off', 'dynamic']).optional(),
    /** AGoQ memory budget in bytes: when set, per-layer bit-widths are chosen to fit it. */
    budget_bytes: z.number().int().positive().optional(),
  })
  .strict();
export type Scheme = z.infer<typeof SchemeSchema>;

export function parseScheme(raw: unknown): Scheme {
  const r = SchemeSchema.safeParse(raw);
  if (!r.success) {
    throw new Error('invalid scheme:\n' + r.error.issues.map((i) => `  ${i.path.join('.') || '(scheme)'}: ${i.message}`).join('\n'));
  }
  return r.data;
}

/** The effective scheme of layer `l` (layer default overridden by the layer's own cells). */
export function layerScheme(s: Scheme, l: number): LayerScheme {
  const o = s.layers[String(l)] ?? {};
  return {
    weights: o.weights ?? s.layer.weights,
    gemm_inputs: o.gemm_inputs ?? s.layer.gemm_inputs,
    gemm_output_grads: o.gemm_output_grads ?? s.layer.gemm_output_grads,
    saved: { ...s.layer.saved, ...(o.saved ?? {}) },
    compute: o.compute ?? s.layer.compute ?? FP32_COMPUTE,
  };
}

export function savedSpec(s: Scheme, l: number, kind: SavedKind): SavedSpec {
  return layerScheme(s, l).saved[kind] ?? FP32;
}

export function isFp32(q: QuantSpec | SavedSpec): boolean {
  return q.format === 'fp32';
}

/**
 * Parts of a scheme the engine does not execute yet. A model refuses such a scheme rather than
 * silently training in fp32 under its name.
 */
export function unsupportedFeatures(s: Scheme): string[] {
  const out: string[] = [];
  if (gradWireOf(s.grads.wire) === null) out.push('a gradient wire format other than fp32 or int8 in groups of 256 with round to nearest (what the data-parallel all-reduce carries)');
  if (s.tp.degree === 1 && s.tp.codec !== 'fp32') out.push('a tensor-parallel codec without a TP degree > 1');
  if (s.budget_bytes !== undefined) out.push('an unresolved memory budget (the trainer resolves budget_bytes into per-layer bits)');
  return out;
}

export function assertSupported(s: Scheme): void {
  const u = unsupportedFeatures(s);
  if (u.length) throw new Error(`scheme '${s.name}' uses features this engine does not implement yet: ${u.join(', ')}`);
}
