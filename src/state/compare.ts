/**
 * What the comparison charts draw, as pure functions: curves smoothed, aligned on a shared x,
 * shown as the difference from a baseline run, and whether runs shared the GPU (so their
 * times compete). Kept out of React so it is tested in Node.
 */
import { busySpans, type LossPoint, type RunState } from './runs';

export type XKey = 'step' | 'elapsed_s';
export type DiffMode = 'absolute' | 'percent';

/**
 * Exponential moving average with TensorBoard's debiasing (the first points are not pulled
 * towards 0); `weight` 0 = raw, towards 1 = smoother.
 */
export function smooth<T extends { loss: number }>(points: readonly T[], weight: number): T[] {
  if (!(weight > 0)) return [...points];
  const w = Math.min(weight, 0.999);
  let acc = 0;
  return points.map((p, i) => {
    acc = acc * w + (1 - w) * p.loss;
    return { ...p, loss: acc / (1 - w ** (i + 1)) };
  });
}

/** One row per x with one column per series (`<key>`), the shape a chart with a brush needs. */
export type Row = { x: number } & Record<string, number | undefined>;

export interface Series {
  key: string;
  points: readonly LossPoint[];
}

/** Merges series on their x (rows sorted by x; a series has a value only where it has a point). */
export function mergeSeries(series: readonly Series[], x: XKey): Row[] {
  const rows = new Map<number, Row>();
  for (const s of series) {
    for (const p of s.points) {
      const xv = p[x];
      if (xv === undefined || !Number.isFinite(xv) || !Number.isFinite(p.loss)) continue;
      const row = rows.get(xv) ?? { x: xv };
      row[s.key] = p.loss;
      rows.set(xv, row);
    }
  }
  return [...rows.values()].sort((a, b) => a.x - b.x);
}

/**
 * A run's curve minus the baseline's at the same step (absolute, or % of the baseline's loss);
 * steps the baseline lacks are left out rather than guessed.
 */
export function diffFromBaseline(points: readonly LossPoint[], baseline: readonly LossPoint[], mode: DiffMode): LossPoint[] {
  const base = new Map(baseline.map((p) => [p.step, p.loss]));
  const out: LossPoint[] = [];
  for (const p of points) {
    const b = base.get(p.step);
    if (b === undefined) continue;
    out.push({ ...p, loss: mode === 'absolute' ? p.loss - b : (100 * (p.loss - b)) / b });
  }
  return out;
}

/**
 * Runs whose time on the GPU overlapped another's (their workers' wall-clock spans; an interrupted
 * run's end at its last message, not now): their times and throughput include waiting for one
 * another on the one GPU. Only runs that took a step count.
 */
export function sharedGpuRuns(runs: readonly (Pick<RunState, 'id' | 'status' | 'startedAt' | 'finishedAt' | 'spans'> & { train: readonly unknown[] })[], now: number): string[] {
  const spans = runs
    .filter((r) => r.train.length > 0)
    .flatMap((r) => busySpans(r, now).map((s) => ({ id: r.id, ...s })))
    .sort((a, b) => a.from - b.from);
  const shared = new Set<string>();
  for (let i = 0; i < spans.length; i++) {
    for (let j = i + 1; j < spans.length && spans[j].from < spans[i].to; j++) {
      if (spans[i].id === spans[j].id) continue;
      shared.add(spans[i].id);
      shared.add(spans[j].id);
    }
  }
  return runs.filter((r) => shared.has(r.id)).map((r) => r.id);
}

/** `label`, or `label #2`, `#3`… so that no two runs read the same. */
export function uniqueLabel(label: string, taken: Iterable<string>): string {
  const used = new Set(taken);
  if (!used.has(label)) return label;
  for (let n = 2; ; n++) if (!used.has(`${label} #${n}`)) return `${label} #${n}`;
}
