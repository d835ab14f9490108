/**
 * AdamW on the GPU with torch.optim.AdamW semantics (fp32 state, the single-tensor implementation's
 * operation order; see adamw.ref.ts), gradient clipping like torch.nn.utils.clip_grad_norm_ read
 * from a GPU-side norm (reduce.ts globalNorm), so a whole step is one command buffer.
 *
 * n = parameters in the range; param, grad, m, v: [n] fp32 (bindings may be slices of bigger
 * buffers); stepParams: the 48-byte uniform below, rewritten each step; gradNorm: [1] fp32.
 *
 * Step-params layout (ADAMW_STEP_BYTES = 48, little-endian; f32 unless noted), all derived in float64
 * from the hyper-parameters and step t (1-based), then rounded once to f32:
 *   0 decay_factor = 1 − lr·wd     4 one_minus_beta1 = 1 − β1    8 beta2        12 one_minus_beta2
 *  16 step_size = lr/(1 − β1^t)   20 bc2_sqrt = sqrt(1 − β2^t)  24 eps         28 max_norm (≤ 0: no clip)
 *  32 lr (informational)          36 t (u32, informational)     40, 44 zero padding
 */
import src from './adamw.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { grid2d, requireBytes } from '../kernels/launch';

export const ADAMW_STEP_BYTES = 48;

export interface AdamwStepValues {
  lr: number;
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** 1-based step count t (torch increments state['step'] before using it). */
  step: number;
  /** Clip the global gradient norm to this; ≤ 0 disables clipping. */
  maxNorm: number;
}

export function packAdamwStep(h: AdamwStepValues): ArrayBuffer {
  if (!(Number.isInteger(h.step) && h.step >= 1)) throw new Error(`packAdamwStep: step must be an integer ≥ 1, got ${h.step}`);
  const buf = new ArrayBuffer(ADAMW_STEP_BYTES);
  const dv = new DataView(buf);
  const f = [
    1 - h.lr * h.weightDecay,
    1 - h.beta1,
    h.beta2,
    1 - h.beta2,
    h.lr / (1 - Math.pow(h.beta1, h.step)),
    Math.sqrt(1 - Math.pow(h.beta2, h.step)),
    h.eps,
    h.maxNorm,
    h.lr,
  ];
  f.forEach((x, i) => dv.setFloat32(4 * i, x, true));
  dv.setUint32(36, h.step, true);
  return buf;
}

/** The uniform buffer the trainer rewrites each step (counted with the other uniform blocks). */
export function createAdamwStepBuffer(rt: Runtime, label = 'adamw.step'): GPUBuffer {
  return rt.mem.allocUniform(label, ADAMW_STEP_BYTES);
}

export function writeAdamwStep(rt: Runtime, buffer: GPUBuffer, h: AdamwStepValues): void {
  rt.device.queue.writeBuffer(buffer, 0, packAdamwStep(h));
}

/** One AdamW update over a contiguous range (weight decay only when `decay`). */
export function adamw(rt: Runtime, o: {
  label: string; param: Binding; grad: Binding; m: Binding; v: Binding; n: number; decay: boolean;
  stepParams: Binding; gradNorm: Binding;
}): Dispatch {
  if (!(Number.isInteger(o.n) && o.n >= 0)) throw new Error(`${o.label}: invalid parameter count ${o.n}`);
  for (const [k, b] of [['param', o.param], ['grad', o.grad], ['m', o.m], ['v', o.v]] as const) requireBytes(o.label, k, b, o.n * 4);
  requireBytes(o.label, 'stepParams', o.stepParams, ADAMW_STEP_BYTES);
  requireBytes(o.label, 'gradNorm', o.gradNorm, 4);
  const u = rt.uniform(`${o.label}.adamw`, new Uniforms().u32(o.n).u32(o.decay ? 1 : 0));
  return rt.kernel({
    label: `${o.label}.adamw`, code: src, entryPoint: 'adamw',
    bindings: [o.param, o.grad, o.m, o.v, o.stepParams, o.gradNorm, u], workgroups: grid2d(rt, Math.ceil(o.n / 256)),
  });
}
