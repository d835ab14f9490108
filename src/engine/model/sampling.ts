/**
 * Picking the next token from logits: temperature, top-k, top-p (nucleus), from a seeded Rng so a
 * seed gives the same text everywhere. Temperature 0 is greedy (the first maximum).
 */
import type { Rng } from '../util/rng';

export interface SamplingOptions {
  /** Softmax temperature; 0 = greedy. */
  temperature: number;
  /** Keep the k most likely tokens (0 = all). */
  topK: number;
  /** Keep the most likely tokens whose probability adds up to at least p (1 = all). */
  topP: number;
}

export const DEFAULT_SAMPLING: SamplingOptions = { temperature: 0.8, topK: 0, topP: 1 };

/** A clear error for options out of range (shared by every caller: CLI, worker, trainer). */
export function checkSampling(o: SamplingOptions): SamplingOptions {
  if (!(Number.isFinite(o.temperature) && o.temperature >= 0)) throw new Error(`temperature must be ≥ 0, got ${o.temperature}`);
  if (!(Number.isInteger(o.topK) && o.topK >= 0)) throw new Error(`top-k must be an integer ≥ 0 (0 = off), got ${o.topK}`);
  if (!(Number.isFinite(o.topP) && o.topP > 0 && o.topP <= 1)) throw new Error(`top-p must be in (0, 1], got ${o.topP}`);
  return o;
}

function argmax(logits: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < logits.length; i++) if (logits[i] > logits[best]) best = i;
  return best;
}

/**
 * The distribution sampleToken draws from: softmax(logits / temperature) restricted to the top-k,
 * then to the smallest most-likely set reaching top-p, renormalised (ties kept in id order).
 * Greedy (temperature 0) is all mass on the first maximum.
 */
export function samplingDistribution(logits: ArrayLike<number>, o: SamplingOptions): Float64Array {
  const n = logits.length;
  const p = new Float64Array(n);
  const best = argmax(logits);
  if (o.temperature <= 0) {
    p[best] = 1;
    return p;
  }
  let sum = 0;
  for (let i = 0; i < n; i++) sum += (p[i] = Math.exp((logits[i] - logits[best]) / o.temperature));
  for (let i = 0; i < n; i++) p[i] /= sum;
  const limitK = o.topK > 0 && o.topK < n;
  if (!limitK && o.topP >= 1) return p;
  const keep = limitK ? o.topK : n;
  const order = ranked(p, keep);
  let mass = 0;
  let kept = 0;
  while (kept < keep && (kept === 0 || mass < o.topP)) mass += p[order[kept++]];
  const q = new Float64Array(n);
  for (let i = 0; i < kept; i++) q[order[i]] = p[order[i]] / mass;
  return q;
}

/** The `keep` most likely ids, most likely first (ties by id): a running insertion for a small top-k, else a sort. */
function ranked(p: Float64Array, keep: number): number[] {
  const before = (a: number, b: number) => p[a] > p[b] || (p[a] === p[b] && a < b);
  if (keep > 256) return Array.from({ length: p.length }, (_, i) => i).sort((a, b) => p[b] - p[a] || a - b).slice(0, keep);
  const top: number[] = [];
  for (let i = 0; i < p.length; i++) {
    if (top.length === keep && !before(i, top[keep - 1])) continue;
    let j = top.length === keep ? keep - 1 : top.length;
    while (j > 0 && before(i, top[j - 1])) {
      top[j] = top[j - 1];
      j--;
    }
    top[j] = i;
  }
  return top;
}

/** Draws a token id from samplingDistribution with one rng.next() (none when greedy). */
export function sampleToken(logits: ArrayLike<number>, o: SamplingOptions, rng: Rng): number {
  if (o.temperature <= 0) return argmax(logits);
  const p = samplingDistribution(logits, o);
  let u = rng.next();
  let last = 0;
  for (let i = 0; i < p.length; i++) {
    if (p[i] === 0) continue;
    last = i;
    u -= p[i];
    if (u < 0) return i;
  }
  return last;
}
