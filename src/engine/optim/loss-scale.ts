/**
 * Dynamic loss scaling for f16 mixed precision, with torch.amp.GradScaler's semantics step for step
 * (torch/amp/grad_scaler.py and the `_amp_update_scale_` kernel):
 *   1. the loss is multiplied by `scale` before backward (in the engine: the loss gradient is seeded
 *      with `scale` instead of 1), so small f16 gradients do not flush to zero;
 *   2. the gradients are unscaled, ×`invScale` = f32(1 / f64(scale)), BEFORE clipping: clipping
 *      sees the true norm;
 *   3. if any gradient is inf or NaN the optimizer step is skipped and scale ×= backoffFactor,
 *      and the count of good steps restarts;
 *   4. after `growthInterval` consecutive good steps, scale ×= growthFactor (kept only if finite)
 *      and the count restarts.
 * The scale is an f32, as GradScaler's is (a float32 tensor); with the default factors it stays a
 * power of two, so unscaling is exact and the unscaled norm is the scaled norm × invScale exactly.
 *
 * The trainer already reduces the global gradient norm on the GPU for clipping (kernels/reduce
 * globalNorm, read by optim/adamw.wgsl). That norm is a plain sum of squares, so under IEEE
 * arithmetic an inf or NaN gradient makes it non-finite: `decideScaledStep` takes it as
 * GradScaler's found-inf. The converse (a non-finite norm from finite gradients, by the sum of
 * squares overflowing f32) needs |g| ≳ 1.8e19/√n; skipping and backing off is the right answer then
 * too. WGSL lets an implementation assume no inf/NaN at run time, so the device bundle checks
 * that the norm does propagate them (bench/f16-device.ts).
 *
 * The pure function `updateLossScale` is the whole state machine, so a GPU-side copy (for steps
 * submitted before the previous one is read back) can be tested against it.
 */

export interface LossScalerOptions {
  /** GradScaler init_scale: 2^16. */
  initScale?: number;
  /** growth_factor: 2. */
  growthFactor?: number;
  /** backoff_factor: 0.5. */
  backoffFactor?: number;
  /** growth_interval: 2000 good steps. */
  growthInterval?: number;
  /** enabled = false: scale 1, nothing skipped or changed (GradScaler(enabled=False)). */
  enabled?: boolean;
}

/** What a checkpoint keeps: GradScaler.state_dict()'s keys, in camelCase. */
export interface LossScalerState {
  scale: number;
  growthFactor: number;
  backoffFactor: number;
  growthInterval: number;
  /** Consecutive good steps since the last growth or back-off (GradScaler `_growth_tracker`). */
  growthTracker: number;
}

export const LOSS_SCALE_DEFAULTS = { initScale: 2 ** 16, growthFactor: 2, backoffFactor: 0.5, growthInterval: 2000 } as const;

/** One update of the scale after a step (GradScaler.update / `_amp_update_scale_`), in f32. */
export function updateLossScale(s: LossScalerState, foundInf: boolean): LossScalerState {
  if (foundInf) return { ...s, scale: Math.fround(s.scale * s.backoffFactor), growthTracker: 0 };
  const good = s.growthTracker + 1;
  if (good === s.growthInterval) {
    const grown = Math.fround(s.scale * s.growthFactor);
    return { ...s, scale: Number.isFinite(grown) ? grown : s.scale, growthTracker: 0 };
  }
  return { ...s, growthTracker: good };
}

function checkState(s: LossScalerState, where: string): void {
  const bad = (k: string, v: unknown) => new Error(`${where}: ${k} must be ${v}`);
  if (!(Number.isFinite(s.scale) && s.scale > 0)) throw bad('scale', `a positive finite number, got ${s.scale}`);
  if (!(Number.isFinite(s.growthFactor) && s.growthFactor > 1)) throw bad('growthFactor', `> 1, got ${s.growthFactor}`);
  if (!(Number.isFinite(s.backoffFactor) && s.backoffFactor > 0 && s.backoffFactor < 1)) throw bad('backoffFactor', `in (0, 1), got ${s.backoffFactor}`);
  if (!(Number.isInteger(s.growthInterval) && s.growthInterval >= 1)) throw bad('growthInterval', `an integer ≥ 1, got ${s.growthInterval}`);
  if (!(Number.isInteger(s.growthTracker) && s.growthTracker >= 0 && s.growthTracker < s.growthInterval)) {
    throw bad('growthTracker', `an integer in [0, growthInterval), got ${s.growthTracker}`);
  }
}

export class LossScaler {
  readonly enabled: boolean;
  private s: LossScalerState;

  constructor(o: LossScalerOptions = {}) {
    this.enabled = o.enabled ?? true;
    this.s = {
      scale: Math.fround(o.initScale ?? LOSS_SCALE_DEFAULTS.initScale),
      growthFactor: o.growthFactor ?? LOSS_SCALE_DEFAULTS.growthFactor,
      backoffFactor: o.backoffFactor ?? LOSS_SCALE_DEFAULTS.backoffFactor,
      growthInterval: o.growthInterval ?? LOSS_SCALE_DEFAULTS.growthInterval,
      growthTracker: 0,
    };
    checkState(this.s, 'LossScaler');
  }

  /** The factor the loss (its gradient's seed) is multiplied by; 1 when disabled. */
  get scale(): number {
    return this.enabled ? this.s.scale : 1;
  }

  /** The unscale factor applied to the gradients before clipping: f32(1 / f64(scale)), as GradScaler.unscale_. */
  get invScale(): number {
    return Math.fround(1 / this.scale);
  }

  get growthTracker(): number {
    return this.s.growthTracker;
  }

  /** loss × scale (GradScaler.scale(outputs)), in f32. */
  scaleLoss(loss: number): number {
    return this.enabled ? Math.fround(loss * this.s.scale) : loss;
  }

  /** After a step: back off on found inf/NaN, else count it and grow after growthInterval. */
  update(foundInf: boolean): void {
    if (this.enabled) this.s = updateLossScale(this.s, foundInf);
  }

  /** For a checkpoint (GradScaler.state_dict). */
  state(): LossScalerState {
    return { ...this.s };
  }

  /** From a checkpoint (GradScaler.load_state_dict); the state is validated. */
  load(state: LossScalerState): void {
    checkState(state, 'LossScaler.load');
    this.s = { ...state, scale: Math.fround(state.scale) };
  }

  static fromState(state: LossScalerState, enabled = true): LossScaler {
    const l = new LossScaler({ enabled });
    l.load(state);
    return l;
  }
}

/** What the optimizer does with one step's gradients. */
export type ScaledStepDecision =
  | {
    kind: 'skip';
    /** The non-finite norm of the scaled gradients (what clip_grad_norm_ would have returned). */
    gradNorm: number;
  }
  | {
    kind: 'step';
    /** invScale: multiplies the scaled gradients first (unscale_). */
    unscale: number;
    /** The unscaled gradients' global norm: scaled norm × unscale, in f32 (exact for a power-of-two scale). */
    gradNorm: number;
    /** clip_grad_norm_'s coefficient on the unscaled gradients: min(1, maxNorm / (gradNorm + 1e-6)); 1 with maxNorm ≤ 0. */
    clipCoef: number;
  };

/**
 * GradScaler's per-step decision, from the global norm of the scaled gradients the trainer computes
 * for clipping: a non-finite norm ⇔ some gradient inf/NaN → skip; else unscale, then clip on the
 * true norm. Pure: the caller applies it, then `scaler.update(decision.kind === 'skip')`.
 * The AdamW kernel computes the same from the GPU-side norm: g = (grad · unscale) · clipCoef.
 */
export function decideScaledStep(scaler: LossScaler, scaledGradNorm: number, maxNorm: number): ScaledStepDecision {
  if (scaler.enabled && !Number.isFinite(scaledGradNorm)) return { kind: 'skip', gradNorm: scaledGradNorm };
  const unscale = scaler.invScale;
  const gradNorm = Math.fround(scaledGradNorm * unscale);
  const clipCoef = maxNorm > 0 ? Math.min(1, Math.fround(Math.fround(maxNorm) / Math.fround(gradNorm + 1e-6))) : 1;
  return { kind: 'step', unscale, gradNorm, clipCoef };
}

/** decideScaledStep, then the scaler's update for it (the order of scaler.step(); scaler.update()). */
export function scaledStep(scaler: LossScaler, scaledGradNorm: number, maxNorm: number): ScaledStepDecision {
  const d = decideScaledStep(scaler, scaledGradNorm, maxNorm);
  scaler.update(d.kind === 'skip');
  return d;
}
