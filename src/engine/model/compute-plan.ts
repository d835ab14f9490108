/**
 * The compute formats of the linear layers' GEMMs, resolved once with the rest of the plan
 * (run-plan.ts): per layer what its forward, input-gradient and weight-gradient GEMMs compute in,
 * the checks that the model can run that combination at this shape, and the INT8 operand buffers
 * the step allocates. The GEMMs themselves: ./int8-gemms.ts; the GEMM path each ran (dot4 or
 * tensor cores) is only known on a device, so the model reports it (LlamaGpu.computePaths).
 */
import type { ComputeFormat, ComputeScheme, QuantSpec, SavedSpec, Scheme } from '../scheme/scheme';
import { isFp32 } from '../scheme/scheme';
import { headCodesLayout } from '../kernels/attention/head-codes';
import { columnAbsmaxWords } from '../kernels/qgemm/block';
import { I8_MAX_K } from '../kernels/qgemm/splitk';
import type { BufferSpec, ModelDims } from './dims';
import { ALIGN_FLOATS } from './params';
import type { ActivationStorage, LayerSavedKey } from './plan';

/** The kernel an f16 GEMM runs (kernels/matmul-f16): tensor cores, the SIMT kernel, or the fp32 GEMM where neither can. */
export type F16GemmPath = 'f16-tensor-core' | 'f16-simt' | 'fp32';

/** The kernel a GEMM ran: the fp32 matmul, INT8 with dot4I8Packed, INT8 on tensor cores, or an f16 kernel. */
export type GemmPath = 'fp32' | 'int8-dot4' | 'int8-tensor-core' | F16GemmPath;

/** The formats the model's kernels execute: an f16 GEMM is recorded in LayerCompute.f16 and executes as fp32 until its path is an f16 one. */
export type ExecFormat = Exclude<ComputeFormat, 'f16'>;

/** Which of a layer's GEMMs the scheme asks to compute in f16 (absent: none). */
export interface LayerF16 {
  forward: boolean;
  dx: boolean;
  dw: boolean;
  /** attention_qk or attention_dp 'f16': the f16 attention forward where verified on the device (f16AttentionPath), else fp32; the backward is fp32. */
  attention: boolean;
}

export interface LayerCompute {
  forward: ExecFormat;
  dx: ExecFormat;
  dw: ExecFormat;
  /** Tokens per scale block of the INT8 dW operands; 'all': per channel over all tokens (qgemmI8). */
  dwBlock: number | 'all';
  /** Rounding of the dY operands of INT8 dX and dW. */
  gradRounding: 'nearest' | 'stochastic';
  /** The attention scores S = Q·Kᵀ (kernels/attention-i8.ts for INT8). */
  attentionQk: ExecFormat;
  /** The attention backward's dP = dO·Vᵀ (INT8: in the INT8-score dK/dV kernel). */
  attentionDp: ExecFormat;
  /** The GEMMs the scheme asks for in f16 (their fields above say fp32, what runs without an f16 path). */
  f16?: LayerF16;
}

const exec = (f: ComputeFormat): ExecFormat => (f === 'f16' ? 'fp32' : f);

export function layerCompute(c: ComputeScheme): LayerCompute {
  const out: LayerCompute = {
    forward: exec(c.forward), dx: exec(c.dx), dw: exec(c.dw), dwBlock: c.dw_block, gradRounding: c.grad_rounding,
    attentionQk: exec(c.attention_qk), attentionDp: exec(c.attention_dp),
  };
  const f16 = { forward: c.forward === 'f16', dx: c.dx === 'f16', dw: c.dw === 'f16', attention: c.attention_qk === 'f16' || c.attention_dp === 'f16' };
  if (Object.values(f16).some(Boolean)) out.f16 = f16;
  return out;
}

/** Some GEMM of the layer is f16 (attention included). */
export const usesF16 = (c: LayerCompute) => !!c.f16 && Object.values(c.f16).some(Boolean);

/** What the device offers f16 GEMMs (gpu features.shaderF16; a tensor-core layout verified by enableF16TensorCores). */
export interface F16Features {
  shaderF16: boolean;
  tensorCores: boolean;
  /** Head dims with an f16 attention forward verified on the device (kernels/attention/f16 enableF16Attention). */
  attentionHeadDims?: number[];
  /** ... and with its backward verified too. */
  attentionBackwardHeadDims?: number[];
}

/**
 * Whether the model's linear layers run f16 GEMMs on an f16 path (f16 operand copies: model/f16-operands.ts,
 * LinearGemms; the trainer's loss scaling). false would resolve every f16 GEMM to fp32 with the reason.
 */
export const MODEL_RUNS_F16_GEMMS = true;

export interface F16Resolution {
  /** The path every linear f16 GEMM of the run takes. */
  path: F16GemmPath;
  /** Why 'fp32' (each reason that applies), or null. */
  why: string | null;
}

/** The path of the run's f16 GEMMs on a device (null: not known, e.g. a plan made before the device): fp32 with the reasons where it cannot run f16. */
export function f16GemmPath(dev: F16Features | null, o: { tp?: boolean; modelRuns?: boolean } = {}): F16Resolution {
  const why: string[] = [];
  if (!dev) why.push('no device features were given to the plan');
  else if (!dev.shaderF16) why.push('this device has no shader-f16');
  if (!(o.modelRuns ?? MODEL_RUNS_F16_GEMMS)) why.push('the model does not run f16 GEMMs yet (their operands\' f16 copies are not built)');
  if (o.tp) why.push('the tensor-parallel layers run fp32 GEMMs');
  if (why.length) return { path: 'fp32', why: why.join('; ') };
  return { path: dev!.tensorCores ? 'f16-tensor-core' : 'f16-simt', why: null };
}

/** The path of the run's f16 attention: the forward on tensor cores (kernels/attention/f16) where verified for this head dim, else fp32 with the reason. */
export interface F16AttentionResolution {
  path: 'f16-tensor-core' | 'fp32';
  why: string | null;
  /** The backward's path (f16 only where its kernels were verified too, and the forward is f16). */
  backward: 'f16-tensor-core' | 'fp32';
}

export function f16AttentionPath(dev: F16Features | null, D: number): F16AttentionResolution {
  const fp32 = (why: string): F16AttentionResolution => ({ path: 'fp32', why, backward: 'fp32' });
  if (!dev) return fp32('no device features were given to the plan');
  if (dev.attentionHeadDims?.includes(D)) return { path: 'f16-tensor-core', why: null, backward: dev.attentionBackwardHeadDims?.includes(D) ? 'f16-tensor-core' : 'fp32' };
  if (!dev.shaderF16) return fp32('this device has no shader-f16');
  if (!dev.attentionHeadDims?.length) return fp32('no f16 attention kernel passed its check on this device');
  return fp32(`head dim ${D}: the f16 attention kernel is verified for head dims ${dev.attentionHeadDims.join(', ')}`);
}

/** Per layer, the path of each GEMM the scheme asks for in f16 (null: not f16); attention: its forward's path (the backward is fp32). */
export interface LayerF16Paths {
  layer: number;
  forward: F16GemmPath | null;
  dx: F16GemmPath | null;
  dw: F16GemmPath | null;
  attention: 'f16-tensor-core' | 'fp32' | null;
  /** The attention backward's path (training only). */
  attentionBackward: 'f16-tensor-core' | 'fp32' | null;
  /** One line for the run's output: what was asked in f16 and what runs. */
  note: string | null;
}

export function layerF16Paths(layers: { compute: LayerCompute }[], training: boolean, r: F16Resolution,
  attn: F16AttentionResolution = { path: 'fp32', why: 'no f16 attention kernel was verified', backward: 'fp32' }): LayerF16Paths[] {
  return layers.map(({ compute: c }, layer) => {
    const f = c.f16;
    const at = (on: boolean | undefined, backward = false) => (on && (!backward || training) ? r.path : null);
    const p: LayerF16Paths = {
      layer, forward: at(f?.forward), dx: at(f?.dx, true), dw: at(f?.dw, true),
      attention: f?.attention ? attn.path : null, attentionBackward: f?.attention && training ? attn.backward : null, note: null,
    };
    const gemms = (['forward', 'dx', 'dw'] as const).filter((g) => p[g]);
    const parts: string[] = [];
    if (gemms.length) parts.push(`${gemms.join(', ')} f16 → ${r.path}${r.why ? ` (${r.why})` : ''}`);
    if (p.attention === 'fp32') parts.push(`attention f16 → fp32 attention (${attn.why})`);
    else if (p.attention) parts.push(`attention f16 → ${p.attention} forward${p.attentionBackward ? `, ${p.attentionBackward} backward` : ''}`);
    p.note = parts.length ? parts.join('; ') : null;
    return p;
  });
}

export const usesInt8 = (c: LayerCompute) => c.forward === 'int8' || c.dx === 'int8' || c.dw === 'int8';

interface LayerCells {
  weights: QuantSpec;
  gemmInputs: QuantSpec;
  gemmOutputGrads: QuantSpec;
  compute: LayerCompute;
}

/** Every reason the model cannot run the scheme's compute formats at this shape (empty: it can). */
export function computeErrors(scheme: Scheme, d: ModelDims, layers: LayerCells[], training: boolean): string[] {
  const out: string[] = [];
  layers.forEach((ly, l) => {
    const c = ly.compute;
    const at = `layer ${l} compute`;
    if (c.gradRounding === 'stochastic' && c.dx === 'fp32' && c.dw === 'fp32') {
      out.push(`${at}: grad_rounding 'stochastic' rounds the dY of INT8 dX/dW GEMMs, and this layer has none`);
    }
    if (c.attentionQk === 'int8') {
      if (scheme.tp.degree > 1) out.push(`${at}: INT8 attention scores are not implemented with tensor parallelism (tp.degree ${scheme.tp.degree})`);
      if (d.D % 4) out.push(`${at}: INT8 attention scores pack 4 values per word and head_dim = ${d.D} is not a multiple of 4`);
    }
    if (c.attentionDp === 'int8' && c.attentionQk !== 'int8') out.push(`${at}: attention_dp 'int8' runs in the INT8-score dK/dV kernel; set attention_qk to 'int8' too`);
    // An f16 GEMM rounds its operands to f16 itself; a fake-quantized copy in front of it would be a second quantizer.
    const f = c.f16;
    if (f && (f.forward || f.dx) && !isFp32(ly.weights)) {
      out.push(`${at}: an f16 forward or dX GEMM reads an f16 copy of the fp32 master weights; the weights cell (${ly.weights.format}) cannot feed it: set weights to fp32`);
    }
    if (f?.forward && !isFp32(ly.gemmInputs)) out.push(`${at}: an f16 forward GEMM casts X to f16 itself; gemm_inputs ${ly.gemmInputs.format} cannot feed it: set gemm_inputs to fp32`);
    if (f?.dw && !isFp32(ly.gemmOutputGrads)) out.push(`${at}: an f16 dW GEMM casts dY to f16 itself; gemm_output_grads ${ly.gemmOutputGrads.format} cannot feed it: set gemm_output_grads to fp32`);
    if (!usesInt8(c)) return;
    if (scheme.tp.degree > 1) out.push(`${at}: INT8 GEMMs are not implemented with tensor parallelism (tp.degree ${scheme.tp.degree})`);
    // The INT8 GEMMs quantize their operands themselves; a fake-quantized copy in front of them would be a second quantizer.
    if (!isFp32(ly.weights)) out.push(`${at}: INT8 GEMMs quantize W themselves (per output channel forward, per input channel for dX); set the weights cell to fp32`);
    if (c.forward === 'int8' && !isFp32(ly.gemmInputs)) out.push(`${at}: an INT8 forward quantizes X per token itself; set gemm_inputs to fp32`);
    if (c.dw === 'int8' && !isFp32(ly.gemmOutputGrads)) out.push(`${at}: an INT8 dW quantizes dY per block itself; set gemm_output_grads to fp32`);
    // Packed int8 rows: every reduction length a multiple of 4.
    for (const [k, v] of Object.entries({ hidden_size: d.C, 'heads·head_dim': d.QC, 'kv_heads·head_dim': d.KVC, intermediate_size: d.F })) {
      if (v % 4) out.push(`${at}: INT8 GEMMs pack 4 values per word and ${k} = ${v} is not a multiple of 4`);
    }
    if (training && c.dw === 'int8') {
      if (c.dwBlock !== 'all') {
        if (d.N % c.dwBlock) out.push(`${at}: dw_block ${c.dwBlock} must divide the tokens per step (batch·context = ${d.N})`);
      } else {
        // The tokens are dW's reduction: packed four to a word, summed exactly in i32 (128²·K < 2³¹, split over K or not).
        if (d.N % 4) out.push(`${at}: dw_block 'all' packs the tokens per step four to a word, and batch·context = ${d.N} is not a multiple of 4`);
        if (d.N > I8_MAX_K) out.push(`${at}: dw_block 'all' sums ${d.N} tokens in one i32 per output, which can overflow (at most ${I8_MAX_K}); use a block size`);
      }
    }
  });
  return out;
}

/**
 * Whether the kernel producing a dY of an INT8 dX GEMM writes its codes itself (RMSNorm's dx, the
 * SwiGLU backward's [dgate | dup]); with stochastic rounding the GEMM quantizes dY (the producers round to nearest).
 */
export const producerDyCodes = (c: LayerCompute) => c.dx === 'int8' && c.gradRounding === 'nearest';

/**
 * Whether gate_proj's and up_proj's dX run as one INT8 GEMM over K = 2F, dX = [dgate | dup]·[Wgate ; Wup],
 * its dY codes written by the SwiGLU backward: where the producer writes codes and the two weights
 * lie back to back in the parameter buffer (F·C a multiple of its alignment; gate_proj precedes
 * up_proj), so that one binding spans [Wgate ; Wup]. Elsewhere the two GEMMs run, the second accumulating.
 */
export const gateUpDxFused = (d: ModelDims, c: LayerCompute, training: boolean) =>
  training && producerDyCodes(c) && (d.F * d.C) % ALIGN_FLOATS === 0;

/**
 * The saved tensors that are also a forward GEMM's X operand: norm1's output (q/k/v), the attention
 * output (o_proj), norm2's output (gate/up), SwiGLU's output (down_proj).
 */
export const GEMM_INPUT_SAVED = ['h1', 'o', 'h2', 'act'] as const satisfies readonly LayerSavedKey[];
export type GemmInputSaved = (typeof GEMM_INPUT_SAVED)[number];

/** Of those, the ones whose producer (RMSNorm, SwiGLU) writes the INT8 codes itself; o's come from its storage quantizer. */
export const PRODUCER_CODED: readonly GemmInputSaved[] = ['h1', 'h2', 'act'];

/**
 * Whether one set of codes serves a saved tensor's storage and an INT8 forward GEMM's X: stored as
 * INT8 per row (one scale per token) with round to nearest, which is the GEMM's X quantizer exactly
 * (both are buildQuantize / quantizeRef 'row'; the producers' fused kernels match it bit for bit).
 */
export const sharesInputCodes = (c: LayerCompute, st: ActivationStorage | undefined, spec: SavedSpec): boolean =>
  c.forward === 'int8' && st?.format === 'int8' && st.granularity.kind === 'row' && spec.rounding === 'nearest';

/** Which INT8 GEMMs some layer runs (training: dX and dW exist only with a backward). */
export function int8Use(layers: { compute: LayerCompute }[], training: boolean): { rows: boolean; dw: boolean } {
  const fwd = layers.some((l) => l.compute.forward === 'int8');
  const dx = training && layers.some((l) => l.compute.dx === 'int8');
  return { rows: fwd || dx, dw: training && layers.some((l) => l.compute.dw === 'int8') };
}

/**
 * Operand buffers of the INT8 GEMMs, shared by every layer (each GEMM quantizes its operands right
 * before it runs): `i8.a` per-row codes of X (forward) or dY (dX) with scales `i8.as`; `i8.w` a
 * weight's codes (W, or Wᵀ for dX) with `i8.ws`, unless the weights' codes are made once per step
 * (`perStepWeights`: ./weight-codes.ts); for dW, dYᵀ (`i8.gt`) and Xᵀ (`i8.xt`) in blocks
 * of tokens (or over all tokens, with the absmax scratch `i8.amax`) with their scales. A layer in
 * `gateUpDx` (gateUpDxFused) reduces over 2F in one dX GEMM: i8.a and i8.w hold K = 2F then.
 */
export function int8Buffers(d: ModelDims, layers: { compute: LayerCompute }[], training: boolean, gateUpDx: readonly boolean[] = [],
  sharedCodes: readonly ReadonlySet<GemmInputSaved>[] = [], perStepWeights = false): BufferSpec[] {
  const use = int8Use(layers, training);
  const out: BufferSpec[] = [];
  const ws = (key: string, bytes: number) => out.push({ key, category: 'workspace', bytes });
  const widest = Math.max(d.C, d.QC, d.KVC, d.F);
  const gateUpK = gateUpDx.some(Boolean) ? 2 * d.F : 0;
  const dxInt8 = training && layers.some((l) => l.compute.dx === 'int8');
  // i8.a holds dX's dY and every forward X whose codes are not the saved tensor's own (sharedCodes).
  const needA = dxInt8
    || layers.some((l, i) => l.compute.forward === 'int8' && GEMM_INPUT_SAVED.some((k) => !sharedCodes[i]?.has(k)));
  if (use.rows && needA) {
    ws('i8.a', d.N * Math.max(widest, gateUpK));
    ws('i8.as', d.N * 4);
  }
  if (use.rows && !perStepWeights) {
    ws('i8.w', d.C * Math.max(d.QC, d.KVC, d.F, gateUpK));
    ws('i8.ws', widest * 4);
  }
  let amaxWords = 0;
  if (use.dw) {
    const blocks = layers.filter((l) => l.compute.dw === 'int8').map((l) => l.compute.dwBlock);
    const block = Math.min(...blocks.map((b) => (b === 'all' ? d.N : b)));
    const outW = Math.max(d.QC, d.KVC, d.F, d.C);
    const inW = Math.max(d.C, d.QC, d.F);
    ws('i8.gt', outW * d.N);
    ws('i8.gts', ((outW * d.N) / block) * 4);
    ws('i8.xt', inW * d.N);
    ws('i8.xts', ((inW * d.N) / block) * 4);
    // Per channel over all tokens: the row tiles' absmax (quantizeColumnsI8), dYᵀ's and Xᵀ's in turn.
    if (blocks.includes('all')) amaxWords = columnAbsmaxWords(d.N, Math.max(outW, inW));
  }
  // dX's Wᵀ per input channel over K = the layer's output width (quantizeColumnsI8 too), the same scratch.
  if (dxInt8 && !perStepWeights) amaxWords = Math.max(amaxWords, ...[d.QC, d.KVC, d.F, d.C, gateUpK].filter((k) => k > 0).map((k) => columnAbsmaxWords(k, widest)));
  if (amaxWords) ws('i8.amax', amaxWords * 4);
  // INT8 attention scores: Q's and K's codes and scales per (token, head) (head-codes buffers),
  // written again before the layer's backward; with INT8 dP dO's and V's as well.
  if (layers.some((l) => l.compute.attentionQk === 'int8')) {
    ws('i8.qc', headCodesLayout(d.N * d.nH, d.D).bytes);
    ws('i8.kc', headCodesLayout(d.N * d.nKV, d.D).bytes);
  }
  if (layers.some((l) => l.compute.attentionDp === 'int8')) {
    ws('i8.oc', headCodesLayout(d.N * d.nH, d.D).bytes);
    ws('i8.vc', headCodesLayout(d.N * d.nKV, d.D).bytes);
  }
  return out;
}
