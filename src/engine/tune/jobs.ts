/**
 * The kernel choices a training run makes, as tuning jobs: each linear layer's forward, dX and dW
 * GEMM that runs in fp32 (with the split-K workspace the model gives its dW GEMMs), the tensor-core
 * layout of each one the scheme runs in f16 (./f16-gemm.ts), of each INT8 one (./i8-gemm.ts) and the form of
 * its transposed quantizers (./i8-quant.ts), the LM head's (and the sampling decoder's), the f16 attention's
 * block layouts per pass and shape where the scheme asks attention in f16 (./f16-attention.ts),
 * and the attention tiles of each pass at the model's head dim (the INT8-score kernels' where the
 * scheme computes attention scores in INT8). Mirrors how the model calls the kernels
 * (model/linear-gemms.ts, llama.ts, backward.ts); a choice it misses is reported by the run as
 * not tuned (store.ts), never silently.
 */
import type { AttentionPass } from '../kernels/attention/tables';
import { type MatmulShape, shapeKey } from '../kernels/matmul/plan';
import { linearsTransposed } from '../model/plan';
import type { RunPlan } from '../plan/run-plan';
import { logitsChunks } from '../plan/logits';
import { f16ShapeKey, type GemmForm, type GemmShape } from '../kernels/matmul-f16/plan';
import { f16AttnTuneKey } from '../kernels/attention/f16/picks';
import { i8TcShapeKey } from '../kernels/qgemm/tc';
import { i8QuantKey } from '../kernels/qgemm/block';
import type { KernelFamily } from './store';

export interface MatmulJob {
  family: 'matmul';
  key: string;
  /** What a person reads: the shape and the layers that run it. */
  label: string;
  shape: MatmulShape;
  /** Split-K workspace the model's call has (0: one pass only). */
  workspaceBytes: number;
  /** Every call of it is an f16 GEMM's fp32 fallback (it runs only where the f16 kernel cannot): tuned after the rest. */
  fallback?: boolean;
  /** Every call of it is outside the training step (the sampling decoder's prefill): tuned after the rest, with what they leave. */
  offStep?: boolean;
  /**
   * The step's calls of this shape that write C and that accumulate into it (o_proj's and down_proj's forward onto
   * the residual, k's, v's and up's dX): a candidate is timed in both forms, as often as the step runs each (absent:
   * writes only). On the H100 the accumulating pipeline of 8192x768x2560 ran 1.36x the writing one (s30c3).
   */
  calls?: GemmCalls;
}

/** A job's calls in the step that write C and that accumulate into it. */
export interface GemmCalls {
  plain: number;
  accumulate: number;
}

/**
 * The forms a GEMM job's candidates are timed in, one GEMM after another as the step's calls of the shape
 * run, reduced (1 writing to 2 accumulating for 8192x768x2560 NN's gate dX, up dX and down forward);
 * writing only where the job does not say. true: accumulating.
 */
export function callForms(calls: GemmCalls | undefined): boolean[] {
  const { plain, accumulate } = calls ?? { plain: 1, accumulate: 0 };
  const gcd = (x: number, y: number): number => (y ? gcd(y, x % y) : x);
  const g = gcd(plain, accumulate) || 1;
  return [...Array(plain / g).fill(false), ...Array(accumulate / g).fill(true)];
}

/** The attention kernels whose tiles are tuned: the fp32 passes and the INT8-score ones. */
export type AttentionKernel = AttentionPass | 'fwdI8' | 'dkdvI8' | 'dkdvDp8';

export interface AttentionJob {
  family: 'attention';
  key: string;
  label: string;
  kernel: AttentionKernel;
  shape: { B: number; T: number; nH: number; nKV: number; D: number };
}

/** An f16 GEMM run on tensor cores: its layout (tune/f16-gemm.ts); the key is its shape and form (matmul-f16 f16ShapeKey). */
export interface F16GemmJob {
  family: 'f16gemm';
  key: string;
  label: string;
  form: GemmForm;
  shape: GemmShape;
  /** The split-K workspace the step gives this GEMM (a dW GEMM's dead backward scratch; 0: one pass), as MatmulJob's. */
  workspaceBytes: number;
  /** As MatmulJob's: the step's writing and accumulating calls of this shape and form. */
  calls?: GemmCalls;
}

/**
 * An INT8 GEMM the step runs with qgemmI8 (forward, dX, and dW over all tokens): its tensor-core layout and
 * whether it splits K (tune/i8-gemm.ts); the key is its shape M×N×K (kernels/qgemm/tc.ts i8TcShapeKey).
 */
export interface I8GemmJob {
  family: 'i8tc';
  key: string;
  label: string;
  shape: { M: number; N: number; K: number };
  /** The split-K workspace the step lends this GEMM (a dW GEMM's dead backward scratch; 0: one pass). */
  workspaceBytes: number;
  calls?: GemmCalls;
}

/**
 * A transposed INT8 quantizer's calls of one shape (model/int8-gemms.ts: Xᵀ and dYᵀ of the dW GEMMs, Wᵀ of the
 * dX GEMMs where the weights are quantized per GEMM): its form (tune/i8-quant.ts); the key is kernels/qgemm/block.ts i8QuantKey.
 */
export interface I8QuantJob {
  family: 'i8quant';
  key: string;
  label: string;
  /** x [R, CN] quantized along R in blocks of G rows, or over all of them. */
  shape: { R: number; CN: number; G: number | 'all' };
  /** Stochastic where some call of it rounds so (dYᵀ under stochastic rounding): timed that way. */
  rounding: 'nearest' | 'stochastic';
}

/** The f16 flash attention's forward spec, or its backward's (dq, dk/dv) pair, for one call shape (tune/f16-attention.ts). */
export interface F16AttnJob {
  family: 'f16attn';
  /** kernels/attention/f16/picks.ts f16AttnTuneKey: pass, head dim, context, heads, KV heads, batch, causal. */
  key: string;
  label: string;
  pass: 'fwd' | 'bwd';
  shape: { B: number; T: number; nH: number; nKV: number; D: number };
}

export type TuneJob = MatmulJob | AttentionJob | F16GemmJob | F16AttnJob | I8GemmJob | I8QuantJob;

export function jobFamily(j: TuneJob): KernelFamily {
  return j.family;
}

/**
 * The GEMM job of `key` in `jobs` (made by `make` on its first call) with one more of the step's calls: the
 * largest workspace any call has, each call's `what` in the label, its form counted (writing or accumulating).
 */
function tally<J extends MatmulJob | F16GemmJob | I8GemmJob>(jobs: Map<string, J>, key: string, make: (key: string) => Omit<J, 'calls'>, workspaceBytes: number,
  what: string, accumulate: boolean): J {
  let job = jobs.get(key);
  if (!job) jobs.set(key, (job = { ...make(key), calls: { plain: 0, accumulate: 0 } } as J));
  else {
    job.workspaceBytes = Math.max(job.workspaceBytes, workspaceBytes);
    if (!job.label.includes(what)) job.label += `, ${what}`;
  }
  job.calls![accumulate ? 'accumulate' : 'plain']++;
  return job;
}

/** The tuning jobs of a resolved model plan (plan/run-plan.ts), one per distinct choice key. */
export function planTuneJobs(plan: RunPlan): TuneJob[] {
  const { N, C, F, V, QC, KVC, B, T, nH, nKV, D } = plan.dims;
  const bytes = (key: string) => plan.buffers.find((b) => b.key === key)?.bytes ?? 0;
  // dW GEMMs split K into a dead backward scratch (linear-gemms.ts dwWorkspace); none under tensor parallelism.
  const ws = (scratch: 'dq' | 'dF1') => (plan.wire.tp ? 0 : bytes(scratch));
  const gemms = new Map<string, MatmulJob>();
  const add = (shape: MatmulShape, workspaceBytes: number, what: string, fallback = false, accumulate = false, offStep = false) => {
    const job = tally(gemms, shapeKey(shape), (key) => ({
      family: 'matmul', key, label: `${shape.M}x${shape.N}x${shape.K} ${shape.transA ? 'T' : 'N'}${shape.transB ? 'T' : 'N'}: ${what}`, shape, workspaceBytes,
      ...(fallback ? { fallback } : {}), ...(offStep ? { offStep } : {}),
    }), workspaceBytes, what, accumulate);
    if (!fallback) delete job.fallback;
    if (!offStep) delete job.offStep;
  };
  // [name, in, out, dW scratch, whether its forward and its dX accumulate into their outputs (llama.ts, backward.ts):
  // 'dq' where the call names dq as the fp32 GEMM's scratch (linear-gemms.ts fp32Accumulate: a writing GEMM there, where dq holds C)]
  const linears: [string, number, number, 'dq' | 'dF1', boolean | 'dq', boolean | 'dq'][] = [
    ['q', C, QC, 'dF1', false, false], ['k', C, KVC, 'dF1', false, true], ['v', C, KVC, 'dF1', false, true], ['o', QC, C, 'dF1', true, false],
    ['gate', C, F, 'dq', false, false], ['up', C, F, 'dq', false, 'dq'], ['down', F, C, 'dq', 'dq', false],
  ];
  const nn = linearsTransposed(N, plan.linearNnMinRows);
  const fp32Acc = (acc: boolean | 'dq') => acc === true || (acc === 'dq' && bytes('dq') < N * C * 4);
  // The GEMMs a scheme asks in f16 (model/linear-gemms.ts): forward Y = X·Wᵀ (NT), dX = dY·W (NN),
  // dW = dYᵀ·X (TN). Whether they run on tensor cores is the device's: the job kind skips them where not.
  const f16 = new Map<string, F16GemmJob>();
  const addF16 = (form: GemmForm, shape: GemmShape, workspaceBytes: number, what: string, accumulate = false) => {
    tally(f16, f16ShapeKey(form, shape), (key) => ({ family: 'f16gemm', key, label: `f16 ${shape.M}x${shape.N}x${shape.K} ${form}: ${what}`, form, shape, workspaceBytes }),
      workspaceBytes, what, accumulate);
  };
  // The INT8 GEMMs (model/int8-gemms.ts): forward X·Wᵀ [tokens, out, in], dX dY·W [tokens, in, out] (gate's and
  // up's as one over K = 2F where plan.gateUpDx), dW dYᵀ·X [out, in, tokens] over all tokens only (blocked dW runs dot4).
  const i8 = new Map<string, I8GemmJob>();
  const addI8 = (M: number, Nn: number, K: number, workspaceBytes: number, what: string, accumulate = false) => {
    tally(i8, i8TcShapeKey(M, Nn, K), (key) => ({ family: 'i8tc', key, label: `int8 ${key}: ${what}`, shape: { M, N: Nn, K }, workspaceBytes }),
      workspaceBytes, what, accumulate);
  };
  // Their transposed quantizers (int8-gemms.ts): a dW's Xᵀ (once for the GEMMs sharing X: q/k/v, gate/up) and dYᵀ,
  // a dX's Wᵀ per input channel unless the plan makes the weights' codes once per step (plan.wcodes).
  const quant = new Map<string, I8QuantJob>();
  const addQuant = (R: number, CN: number, G: number | 'all', what: string, rounding: 'nearest' | 'stochastic') => {
    const key = i8QuantKey(R, CN, G);
    const job = quant.get(key);
    if (!job) quant.set(key, { family: 'i8quant', key, label: `int8 quantizer ${R}x${CN} per ${G === 'all' ? 'column' : `${G} rows`}: ${what}`, shape: { R, CN, G }, rounding });
    else {
      if (!job.label.includes(what)) job.label += `, ${what}`;
      if (rounding === 'stochastic') job.rounding = rounding;
    }
  };
  const xShared = new Set(['k', 'v', 'up']);
  const int8Attention = { qk: false, dp: false };
  let f16Attention = false;
  for (const [l, layer] of plan.layers.entries()) {
    const c = layer.compute;
    for (const [name, cin, cout, scratch, fwdAcc, dxAcc] of linears) {
      if (c.forward === 'fp32') add({ M: N, N: cout, K: cin, transA: false, transB: !nn }, 0, `${name} forward`, !!c.f16?.forward, fp32Acc(fwdAcc));
      if (c.dx === 'fp32') add({ M: N, N: cin, K: cout }, 0, `${name} dX`, !!c.f16?.dx, fp32Acc(dxAcc));
      if (c.dw === 'fp32') add({ M: cout, N: cin, K: N, transA: true }, ws(scratch), `${name} dW`, !!c.f16?.dw);
      // The f16 GEMMs accumulate in the GEMM ('dq' too: fp32Accumulate is the fp32 path's).
      if (c.f16?.forward) addF16('NT', { M: N, N: cout, K: cin }, 0, `${name} forward`, fwdAcc !== false);
      if (c.f16?.dx && plan.training) addF16('NN', { M: N, N: cin, K: cout }, 0, `${name} dX`, dxAcc !== false);
      // The step's f16 dW splits K into the same scratch (linear-gemms.ts dwGemm): timed without it, a layout
      // that wins in one pass lost in the step (s30c2: the f16 dW picks made the tuned step 6 % slower).
      if (c.f16?.dw && plan.training) addF16('TN', { M: cout, N: cin, K: N }, ws(scratch), `${name} dW`);
      if (c.forward === 'int8') addI8(N, cout, cin, 0, `${name} forward`, fwdAcc !== false);
      const fusedDx = plan.gateUpDx[l] && (name === 'gate' || name === 'up');
      if (c.dx === 'int8' && plan.training && !fusedDx) addI8(N, cin, cout, 0, `${name} dX`, dxAcc !== false);
      if (c.dw === 'int8' && c.dwBlock === 'all' && plan.training) addI8(cout, cin, N, ws(scratch), `${name} dW`);
      if (c.dx === 'int8' && plan.training && !plan.wcodes && !fusedDx) addQuant(cout, cin, 'all', `${name} dX Wᵀ`, 'nearest');
      if (c.dw === 'int8' && plan.training) {
        if (!xShared.has(name)) addQuant(N, cin, c.dwBlock, `${name} dW Xᵀ`, 'nearest');
        addQuant(N, cout, c.dwBlock, `${name} dW dYᵀ`, c.gradRounding);
      }
    }
    if (c.dx === 'int8' && plan.training && plan.gateUpDx[l] && !plan.wcodes) addQuant(2 * F, C, 'all', 'gate and up dX Wᵀ', 'nearest');
    if (c.dx === 'int8' && plan.training && plan.gateUpDx[l]) addI8(N, C, 2 * F, 0, 'gate and up dX');
    if (c.attentionQk === 'int8') int8Attention.qk = true;
    // Whether the f16 kernel runs is the device's (its check, the head dim): the job kind skips it where not.
    if (c.f16?.attention) f16Attention = true;
    if (c.attentionDp === 'int8') int8Attention.dp = true;
  }
  // The LM head runs a chunk of plan.logitsRows tokens at a time (model/lm-head.ts): one shape, or two with a shorter last chunk.
  const headRows = [...new Set(logitsChunks(N, plan.logitsRows).map((c) => c.rows))];
  for (const R of headRows) add({ M: R, N: V, K: C, transB: true }, 0, 'lm_head forward');
  // The trainer's KV-cache decoder (model/decode.ts) prefills a context of T tokens with fp32 GEMMs on the stored weights.
  if (plan.training) for (const [name, cin, cout] of linears) add({ M: T, N: cout, K: cin, transB: true }, 0, `${name} decoder prefill`, false, false, true);
  if (plan.training) {
    for (const R of headRows) {
      add({ M: R, N: C, K: V }, 0, 'lm_head dX');
      add({ M: V, N: C, K: R, transA: true }, ws('dq'), 'lm_head dW');
    }
  }
  const shape = { B, T, nH, nKV, D };
  const kernels: AttentionKernel[] = ['fwd', ...(plan.training ? ['dq', 'dkdv'] as const : [])];
  if (int8Attention.qk) kernels.push('fwdI8', ...(plan.training ? ['dkdvI8'] as const : []));
  if (int8Attention.dp && plan.training) kernels.push('dkdvDp8');
  const attention: AttentionJob[] = kernels.map((kernel) => ({
    family: 'attention', key: `${kernel}/D${D}`, label: `attention ${kernel} at head dim ${D} (${B}x${T}x${nH}x${D})`, kernel, shape,
  }));
  const f16Attn: F16AttnJob[] = !f16Attention ? [] : (['fwd', ...(plan.training ? ['bwd'] as const : [])] as const).map((pass) => ({
    family: 'f16attn', key: f16AttnTuneKey(pass, shape), label: `f16 attention ${pass === 'fwd' ? 'forward' : 'backward (dq, dk/dv)'} (${B}x${T}x${nH}/${nKV}x${D}, causal)`, pass, shape,
  }));
  return [...gemms.values(), ...f16.values(), ...i8.values(), ...quant.values(), ...attention, ...f16Attn];
}
