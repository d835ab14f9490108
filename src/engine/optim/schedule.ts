/**
 * Learning-rate schedule: linear warmup, then cosine decay to min_lr (nanoGPT's get_lr, 0-based).
 * tools/torch_replay.py implements the same formula; keep the two identical.
 *
 *   step < warmup:  lr · (step + 1) / warmup
 *   otherwise:      ratio = min(1, (step − warmup) / max(1, total − warmup))
 *                   min_lr + ½(1 + cos(π · ratio)) · (lr − min_lr)
 *
 * `step` is the 0-based index of the optimizer update that uses the rate. Past total_steps the rate
 * stays at min_lr (ratio is clamped) rather than climbing back up the cosine.
 */
export interface LrSchedule {
  lr: number;
  min_lr: number;
  warmup_steps: number;
  total_steps: number;
}

export function lrAt(step: number, s: LrSchedule): number {
  if (!Number.isSafeInteger(step) || step < 0) throw new Error(`lr step must be a non-negative integer, got ${step}`);
  if (!Number.isSafeInteger(s.warmup_steps) || s.warmup_steps < 0) throw new Error(`warmup_steps must be a non-negative integer, got ${s.warmup_steps}`);
  if (!Number.isSafeInteger(s.total_steps) || s.total_steps < 0) throw new Error(`total_steps must be a non-negative integer, got ${s.total_steps}`);
  if (step < s.warmup_steps) return (s.lr * (step + 1)) / s.warmup_steps;
  const ratio = Math.min(1, (step - s.warmup_steps) / Math.max(1, s.total_steps - s.warmup_steps));
  return s.min_lr + 0.5 * (1 + Math.cos(Math.PI * ratio)) * (s.lr - s.min_lr);
}
