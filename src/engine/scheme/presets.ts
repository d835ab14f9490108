/**
 * Scheme presets. Only what the engine executes is offered: a scheme that asks for a feature the
 * engine does not implement yet is rejected by `unsupportedFeatures` (see docs/schemes.md).
 */
import { FP32, parseScheme, type QuantSpec, type SavedKind, type SavedSpec, type Scheme } from './scheme';
import { type GradWire, INT8_WIRE } from './wire';

const q = <F extends SavedSpec['format']>(format: F, granularity: QuantSpec['granularity'] = 'group', group = 128) => ({
  format, granularity, group, rounding: 'nearest' as const,
});

/** AGoQ's layer-type rule: attention activations stay full precision, every other saved tensor INT4. */
const AGOQ_SAVED: Partial<Record<SavedKind, SavedSpec>> = {
  norm_input: q('int4'),
  qkv_input: q('int4'),
  attn_qkv: FP32,
  attn_out: FP32,
  oproj_input: q('int4'),
  mlp_input: q('int4'),
  swiglu: q('int4'),
  down_input: q('int4'),
  head_input: q('int4'),
};

/**
 * INT8 compute in all three GEMMs of every linear layer; dW per channel over all the step's tokens,
 * which is qgemmI8's form (tensor cores). INT8_BLOCK_DW keeps Jetfire's blocks of 32 tokens (dot4).
 */
const INT8_COMPUTE = { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', grad_rounding: 'nearest' } as const;
const INT8_QK_COMPUTE = { ...INT8_COMPUTE, attention_qk: 'int8' } as const;
const INT8_ATTN_COMPUTE = { ...INT8_QK_COMPUTE, attention_dp: 'int8' } as const;
const INT8_BLOCK_DW = { ...INT8_COMPUTE, dw_block: 32 } as const;

/**
 * Mixed precision: every linear layer's forward, dX and dW GEMMs and the attention in f16 (f32
 * accumulation; f32 master weights, AdamW state, norms, softmax statistics and loss), with dynamic
 * loss scaling. Each GEMM runs f16 only where the plan resolves an f16 path for it, else fp32, and
 * the plan's per-layer paths say which (model/compute-plan.ts f16GemmPath).
 */
const F16_COMPUTE = { forward: 'f16', dx: 'f16', dw: 'f16', attention_qk: 'f16', attention_dp: 'f16' } as const;
const F16_NOTE = ' GEMMs run f16 only where the plan resolves an f16 path (shader-f16, the model\'s f16 GEMMs): its per-layer paths say which.';

/**
 * What PyTorch autocast saves in half precision: every linear layer's input, attention's Q/K/V and
 * output, and SwiGLU's inputs (gate, up) in f16; RMSNorm's inputs (the residual stream) stay fp32.
 */
const F16_SAVED: Partial<Record<SavedKind, SavedSpec>> = {
  qkv_input: q('f16'), attn_qkv: q('f16'), attn_out: q('f16'), oproj_input: q('f16'),
  mlp_input: q('f16'), swiglu: q('f16'), down_input: q('f16'), head_input: q('f16'),
};

/** AGoQ over f16 mixed precision: its 16-bit attention activations in f16 (the BF16 presets use bf16). */
const AGOQ_F16_SAVED: Partial<Record<SavedKind, SavedSpec>> = { ...AGOQ_SAVED, attn_qkv: q('f16'), attn_out: q('f16') };

/** AGoQ as its paper specifies it: the attention activations (Q/K/V, attention output) in BF16. */
const AGOQ_BF16_SAVED: Partial<Record<SavedKind, SavedSpec>> = { ...AGOQ_SAVED, attn_qkv: q('bf16'), attn_out: q('bf16') };

export const SCHEME_PRESETS: Record<string, Scheme> = {
  fp32: parseScheme({ name: 'fp32', description: 'The engine as is: everything fp32.' }),
  agoq: parseScheme({
    name: 'agoq',
    description: 'AGoQ: INT4 group-128 storage of every non-attention saved activation (attention kept fp32) and INT8 per-block (256) gradient storage.',
    layer: { saved: AGOQ_SAVED },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
  }),
  // The quantized pre-training study (Chitsaz et al.): one factor at a time, symmetric linear
  // absmax, round to nearest; weights per output channel, GEMM inputs and output gradients per token.
  w8: parseScheme({ name: 'w8', description: 'Study: 8-bit per-channel weights in the forward/backward GEMMs (fp32 master weights).', layer: { weights: q('int8', 'row') } }),
  w4: parseScheme({ name: 'w4', description: 'Study: 4-bit per-channel weights.', layer: { weights: q('int4', 'row') } }),
  a8: parseScheme({ name: 'a8', description: 'Study: 8-bit per-token inputs of the forward GEMMs.', layer: { gemm_inputs: q('int8', 'row') } }),
  a4: parseScheme({ name: 'a4', description: 'Study: 4-bit per-token GEMM inputs.', layer: { gemm_inputs: q('int4', 'row') } }),
  g8: parseScheme({ name: 'g8', description: 'Study: 8-bit per-token output gradients on the weight-gradient path (dW = Q(dY)ᵀX).', layer: { gemm_output_grads: q('int8', 'row') } }),
  g4: parseScheme({ name: 'g4', description: 'Study: 4-bit per-token output gradients.', layer: { gemm_output_grads: q('int4', 'row') } }),
  w8a8g8: parseScheme({ name: 'w8a8g8', description: 'Study: W8 per-channel with A8 and G8 per-token.', layer: { weights: q('int8', 'row'), gemm_inputs: q('int8', 'row'), gemm_output_grads: q('int8', 'row') } }),
  // Real INT8 compute (not fake quantization): the GEMMs multiply INT8 codes (docs/schemes.md, "Compute formats").
  int8: parseScheme({
    name: 'int8',
    description: 'W8A8G8 as real compute: every linear layer\'s forward (X per token, W per output channel), dX (dY per token, W per input channel) and dW (dY and X per channel over all the step\'s tokens) are INT8 GEMMs, dequantized in the epilogue.',
    weight_codes: 'per-step',
    layer: { compute: INT8_COMPUTE },
  }),
  'int8-qk': parseScheme({
    name: 'int8-qk',
    description: 'int8 with the attention scores S = Q·Kᵀ in INT8 too (Q and K per token and head after RoPE, as SageAttention); softmax·V and the attention gradients stay fp32.',
    weight_codes: 'per-step',
    layer: { compute: INT8_QK_COMPUTE },
  }),
  'int8-attn': parseScheme({
    name: 'int8-attn',
    description: 'int8-qk with the attention backward\'s dP = dO·Vᵀ in INT8 too (dO and V per token and head); dV, dK and dq stay fp32.',
    weight_codes: 'per-step',
    layer: { compute: INT8_ATTN_COMPUTE },
  }),
  'int8-blockdw': parseScheme({
    name: 'int8-blockdw',
    description: 'int8 with the Jetfire-style dW: dY and X per channel in blocks of 32 tokens, scales folded per block (the dot4 blocked kernel; no tensor cores).',
    weight_codes: 'per-step',
    layer: { compute: INT8_BLOCK_DW },
  }),
  switchback: parseScheme({
    name: 'switchback',
    description: 'SwitchBack: INT8 forward and dX GEMMs (per-token X and dY, per-channel W), the weight-gradient GEMM in fp32.',
    weight_codes: 'per-step',
    layer: { compute: { ...INT8_COMPUTE, dw: 'fp32' } },
  }),
  'agoq-int8': parseScheme({
    name: 'agoq-int8',
    description: 'AGoQ storage (INT4 non-attention activations, attention Q/K/V and output kept BF16 as AGoQ specifies, INT8 per-256 gradients) with every linear layer\'s forward, dX and dW computed as INT8 GEMMs.',
    weight_codes: 'per-step',
    layer: { saved: AGOQ_BF16_SAVED, compute: INT8_COMPUTE },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
  }),
  'agoq-int8-qk': parseScheme({
    name: 'agoq-int8-qk',
    description: 'agoq-int8 with the attention scores S = Q·Kᵀ in INT8 (Q and K per token and head after RoPE, as SageAttention).',
    weight_codes: 'per-step',
    layer: { saved: AGOQ_BF16_SAVED, compute: INT8_QK_COMPUTE },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
  }),
  'agoq-int8-attn': parseScheme({
    name: 'agoq-int8-attn',
    description: 'agoq-int8-qk with the attention backward\'s dP = dO·Vᵀ in INT8 too (dO and V per token and head).',
    weight_codes: 'per-step',
    layer: { saved: AGOQ_BF16_SAVED, compute: INT8_ATTN_COMPUTE },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
  }),
  // The tensors that are both saved and a forward GEMM's X at INT8 per row: one set of codes serves
  // storage and GEMM (model/compute-plan.ts sharesInputCodes), at twice agoq-int8's bytes for those three.
  // Its W codes stay per GEMM: kept per step they would take base (batch 16, context 512) past 45 % of fp32's memory.
  'agoq-int8-shared': parseScheme({
    name: 'agoq-int8-shared',
    description: 'agoq-int8 with the QKV, MLP and down-proj inputs stored INT8 per token: the codes the RMSNorm/SwiGLU write for the INT8 forward GEMM are the stored activation (no second quantize pass); other activations INT4, attention BF16 (as AGoQ specifies).',
    layer: { saved: { ...AGOQ_BF16_SAVED, qkv_input: q('int8', 'row'), mlp_input: q('int8', 'row'), down_input: q('int8', 'row') }, compute: INT8_COMPUTE },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
  }),
  f16: parseScheme({
    name: 'f16',
    description: 'Mixed precision (the baseline PyTorch users train with): f16 operands with f32 accumulation in every linear layer\'s forward, dX and dW and in attention, f32 master weights and AdamW state, dynamic loss scaling; the activations autocast saves in half precision stored f16 (linear layers\' inputs, attention Q/K/V and output, SwiGLU\'s gate and up), the residual stream (RMSNorm inputs) fp32.' + F16_NOTE,
    layer: { saved: F16_SAVED, compute: F16_COMPUTE },
    loss_scaling: 'dynamic',
  }),
  'agoq-f16': parseScheme({
    name: 'agoq-f16',
    description: 'AGoQ storage and gradients (INT4 non-attention activations, attention Q/K/V and output 16-bit as AGoQ specifies, here f16, INT8 per-256 gradients) over the f16 mixed-precision baseline.' + F16_NOTE,
    layer: { saved: AGOQ_F16_SAVED, compute: F16_COMPUTE },
    grads: { storage: q('int8', 'group', 256), wire: FP32 },
    loss_scaling: 'dynamic',
  }),
  'taco-f16': parseScheme({
    name: 'taco-f16',
    description: 'TACO\'s exchange (simulated TP degree 4, ASH + dual-scale FP8 all-reduces) over the f16 mixed-precision baseline (the tensor-parallel layers\' GEMMs run fp32 for now).' + F16_NOTE,
    layer: { compute: F16_COMPUTE },
    tp: { degree: 4, codec: 'taco', group: 128 },
    loss_scaling: 'dynamic',
  }),
  'int8-f16': parseScheme({
    name: 'int8-f16',
    description: 'INT8 GEMMs where int8 has them (every linear layer\'s forward, dX and dW) over the f16 mixed-precision baseline: attention f16, dynamic loss scaling.' + F16_NOTE,
    weight_codes: 'per-step',
    layer: { compute: { ...INT8_COMPUTE, attention_qk: 'f16', attention_dp: 'f16' } },
    loss_scaling: 'dynamic',
  }),
  m8: parseScheme({ name: 'm8', description: 'Study: Adam first moment quantized to 8 bits per row each step.', adam: { m: q('int8', 'row'), v: FP32 } }),
  m4: parseScheme({ name: 'm4', description: 'Study: Adam first moment 4-bit per row.', adam: { m: q('int4', 'row'), v: FP32 } }),
  v8: parseScheme({ name: 'v8', description: 'Study: Adam second moment 8-bit linear per row (signed, as the study\'s code): small entries round to 0.', adam: { m: FP32, v: q('int8', 'row') } }),
  v4: parseScheme({ name: 'v4', description: 'Study: Adam second moment 4-bit linear per row.', adam: { m: FP32, v: q('int4', 'row') } }),
  taco: parseScheme({
    name: 'taco',
    description: 'TACO: the tensor-parallel all-reduces of every layer (simulated TP degree 4) carry ASH + dual-scale FP8 (E4M3, groups of 128).',
    tp: { degree: 4, codec: 'taco', group: 128 },
  }),
  // micro (4 heads, 2 KV heads) cannot be split 4 ways; TP degree 2 divides it (and any batch whose
  // B·T is a multiple of 8: a rank's chunk of B·T·32/2 values must fill groups of 128).
  'taco-tp2': parseScheme({
    name: 'taco-tp2',
    description: 'TACO on a model that cannot be split 4 ways (micro): simulated TP degree 2, all-reduces carried by ASH + dual-scale FP8 (E4M3, groups of 128).',
    tp: { degree: 2, codec: 'taco', group: 128 },
  }),
  'tp4-fp32': parseScheme({
    name: 'tp4-fp32',
    description: 'Simulated TP degree 4 with uncompressed fp32 all-reduces (the baseline for taco).',
    tp: { degree: 4, codec: 'fp32', group: 128 },
  }),
};

export function schemePreset(name: string): Scheme {
  const s = SCHEME_PRESETS[name];
  if (!s) throw new Error(`unknown scheme '${name}' (presets: ${Object.keys(SCHEME_PRESETS).join(', ')}, or a JSON file)`);
  return s;
}

/** A data-parallel run's scheme: fp32 everywhere, the gradient crossing the all-reduce as `wire` (grads.wire). */
export function dataParallelScheme(wire: GradWire): Scheme {
  return parseScheme({ name: `dp-${wire}`, grads: { storage: FP32, wire: wire === 'int8' ? INT8_WIRE : FP32 } });
}
