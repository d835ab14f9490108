/**
 * Dynamic loss scaling run on the GPU, in the step's command buffer, so that steps submitted ahead
 * of the previous one's readback (the trainer's pipelining) still scale, skip and grow exactly as
 * torch.amp.GradScaler: the state machine of loss-scale.ts (updateLossScale) mirrored in
 * loss-scale.wgsl and loss-scale-update.wgsl, over a 32-byte state buffer. A step is
 *
 *   backward (loss gradient seeded with state.scale) → globalNorm of the scaled gradients →
 *   lossScaleCheck (found_inf from the norm's bits; the unscaled norm) → adamwScaled per range
 *   (skips on found_inf; g = (grad · inv_scale) · clip(unscaled norm)) → lossScaleUpdate.
 *
 * adamwScaled is optim/adamw.wgsl with its one gradient line replaced (asserted at load), bound to
 * the state buffer as its norm, so both AdamW kernels keep one text.
 */
import adamwSrc from './adamw.wgsl?raw';
import checkSrc from './loss-scale.wgsl?raw';
import updateSrc from './loss-scale-update.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../gpu/runtime';
import { grid2d, requireBytes } from '../kernels/launch';
import { ADAMW_STEP_BYTES } from './adamw';
import type { LossScalerState } from './loss-scale';

export const LOSS_SCALE_STATE_BYTES = 32;

const GRAD_LINE = 'let g = grad[i] * clip;';
if (!adamwSrc.includes(GRAD_LINE)) throw new Error(`loss-scale-gpu: adamw.wgsl no longer has "${GRAD_LINE}"`);
/** AdamW with GradScaler's skip and unscale-before-clip: its `gnorm` binding is the loss-scale state. */
export const ADAMW_SCALED_SRC = adamwSrc.replace(GRAD_LINE, `// Loss scaling (loss-scale.wgsl's state as gnorm): skip on inf/NaN gradients, unscale before clipping.
  if (bitcast<u32>(gnorm[2]) != 0u) { return; }
  let g = (grad[i] * gnorm[1]) * clip;`);

/** The state words of a LossScalerState (last norm 0, nothing found, nothing skipped yet unless given). */
export function packLossScaleState(s: LossScalerState, skipped = 0): ArrayBuffer {
  const buf = new ArrayBuffer(LOSS_SCALE_STATE_BYTES);
  const dv = new DataView(buf);
  dv.setFloat32(4, Math.fround(1 / s.scale), true);
  dv.setFloat32(12, s.scale, true);
  dv.setUint32(16, s.growthTracker, true);
  dv.setUint32(20, skipped, true);
  return buf;
}

export interface GpuLossScaleState extends LossScalerState {
  /** The last step's unscaled global gradient norm (non-finite when it was skipped). */
  norm: number;
  invScale: number;
  /** The last step was skipped (inf/NaN gradients). */
  foundInf: boolean;
  /** Steps skipped since the state was written. */
  skipped: number;
}

export function unpackLossScaleState(bytes: ArrayBuffer, cfg: ScaleConfig): GpuLossScaleState {
  const dv = new DataView(bytes);
  return {
    ...cfg,
    norm: dv.getFloat32(0, true),
    invScale: dv.getFloat32(4, true),
    foundInf: dv.getUint32(8, true) !== 0,
    scale: dv.getFloat32(12, true),
    growthTracker: dv.getUint32(16, true),
    skipped: dv.getUint32(20, true),
  };
}

export function createLossScaleState(rt: Runtime, s: LossScalerState, label = 'lossScale.state'): GPUBuffer {
  return rt.upload('optimizer', label, new Uint8Array(packLossScaleState(s)));
}

/** The state as a checkpoint keeps it (LossScaler.load takes it). */
export async function readLossScaleState(rt: Runtime, state: GPUBuffer, cfg: ScaleConfig): Promise<GpuLossScaleState> {
  return unpackLossScaleState(await rt.read(state, 0, LOSS_SCALE_STATE_BYTES), cfg);
}

type ScaleConfig = Pick<LossScalerState, 'growthFactor' | 'backoffFactor' | 'growthInterval'>;

/** After the global norm of the scaled gradients: found_inf and the unscaled norm into the state. */
export function lossScaleCheck(rt: Runtime, o: { label: string; gradNorm: Binding; state: Binding }): Dispatch {
  requireBytes(o.label, 'gradNorm', o.gradNorm, 4);
  requireBytes(o.label, 'state', o.state, LOSS_SCALE_STATE_BYTES);
  return rt.kernel({ label: `${o.label}.lossScaleCheck`, code: checkSrc, entryPoint: 'check', bindings: [o.state, o.gradNorm], workgroups: [1] });
}

/** After AdamW: the scale's update (back off on found_inf, grow after growthInterval good steps). */
export function lossScaleUpdate(rt: Runtime, o: { label: string; state: Binding; cfg: ScaleConfig }): Dispatch {
  requireBytes(o.label, 'state', o.state, LOSS_SCALE_STATE_BYTES);
  return rt.kernel({ label: `${o.label}.lossScaleUpdate`, code: updateSrc, entryPoint: 'update', bindings: [o.state, configUniform(rt, o.label, o.cfg)], workgroups: [1] });
}

function configUniform(rt: Runtime, label: string, c: ScaleConfig): GPUBuffer {
  return rt.uniform(`${label}.lossScale`, new Uniforms().f32(c.growthFactor).f32(c.backoffFactor).u32(c.growthInterval).u32(0));
}

/** adamw() with the loss scale: the same bindings, the state buffer in place of the norm. */
export function adamwScaled(rt: Runtime, o: {
  label: string; param: Binding; grad: Binding; m: Binding; v: Binding; n: number; decay: boolean;
  stepParams: Binding; state: Binding;
}): Dispatch {
  if (!(Number.isInteger(o.n) && o.n >= 0)) throw new Error(`${o.label}: invalid parameter count ${o.n}`);
  for (const [k, b] of [['param', o.param], ['grad', o.grad], ['m', o.m], ['v', o.v]] as const) requireBytes(o.label, k, b, o.n * 4);
  requireBytes(o.label, 'stepParams', o.stepParams, ADAMW_STEP_BYTES);
  requireBytes(o.label, 'state', o.state, LOSS_SCALE_STATE_BYTES);
  const u = rt.uniform(`${o.label}.adamwScaled`, new Uniforms().u32(o.n).u32(o.decay ? 1 : 0));
  return rt.kernel({
    label: `${o.label}.adamwScaled`, code: ADAMW_SCALED_SRC, entryPoint: 'adamw',
    bindings: [o.param, o.grad, o.m, o.v, o.stepParams, o.state, u], workgroups: grid2d(rt, Math.ceil(o.n / 256)),
  });
}
