/**
 * AGoQ memory-budget bit allocation (seeds brief §1.5, a reconstruction): choose a bit-width per
 * saved activation tensor to
 *
 *     minimise  Σ_i w_i · Err_i(b_i)   subject to   staticBytes + Σ_i bytes_i(b_i) ≤ budgetBytes
 *
 * with the brief's uniform-noise model for an absmax quantizer of step s_b:
 *   Err(b) = E · s_b² / 12,  s_b = amax / (2^(b−1) − 1) for b ∈ {4, 8}   (INT-b, group absmax)
 *   Err(16) = E · (2^-8 · amax)² / 12                                      (bf16-like: 8-bit mantissa)
 *   Err(32) = 0
 *   bytes(b) = ⌈E·b/8⌉ + 4·⌈E/G⌉ for b ≤ 8 (codes + one fp32 scale per group), 2E for 16, 4E for 32
 * where E = elements saved per step (fold in the number of micro-batches in flight, n_s under 1F1B,
 * by multiplying E) and amax defaults to 1 (relative errors). `rowLength` is carried for callers
 * that map bits back to QuantSpecs; the model groups along the flattened tensor, like the
 * quantizers.
 *
 * Algorithm — greedy by marginal error reduction per byte, starting from each tensor's cheapest choice:
 * 1. Per entry, the lower convex hull of its (bytes, w·Err) points over the allowed choices; each
 *    hull edge is an upgrade step with ratio = error reduction / extra bytes. Hull ratios decrease
 *    along an entry, so taking steps in ratio order keeps each entry's steps in sequence. (With this
 *    model and G ≥ 32 every choice is on the hull; dominated choices — more bytes, no less error —
 *    are never used.)
 * 2. One budget-independent order of all steps (ratio descending; ties by entry, then step), then
 *    first-fit: take a step if it fits in what is left, else freeze that entry (its later steps
 *    build on this one).
 * Because the order does not depend on the budget, the result is monotone: with more budget the
 * error is never larger (the first step a larger budget takes and a smaller one cannot, of ratio r
 * and cost c, already gains r·c, more than the ≤ r·(left < c) the smaller budget gains afterwards).
 * The price is optimality: this is the classic greedy for the multiple-choice knapsack, within
 * one step's gain of the LP optimum, not the exact optimum (no DP over bytes).
 * Pinned entries (e.g. attention kinds kept at 16/32 bits) keep their bits and count in both sums.
 */

export type Bits = 4 | 8 | 16 | 32;
export const BIT_CHOICES: readonly Bits[] = [4, 8, 16, 32];
export const DEFAULT_GROUP = 128;

export interface BudgetEntry {
  layer: number;
  kind: string;
  /** Elements saved per step (× micro-batches in flight). */
  elements: number;
  rowLength: number;
  /** Observed max|x| (default 1: errors relative to the tensor's range). */
  amax?: number;
  /** Importance weight in the objective (default 1). */
  weight?: number;
  /** Fixed bit-width: not allocated, but counted. */
  pinned?: Bits;
}

export interface BudgetInput {
  layers: BudgetEntry[];
  budgetBytes: number;
  staticBytes: number;
  /** Allowed bit-widths (default 4, 8, 16, 32). */
  choices?: Bits[];
  /** Group size of the b ≤ 8 quantizers, for the scale overhead (default 128). */
  group?: number;
}

export interface BudgetResult {
  /** Per input entry, in input order. */
  bits: Bits[];
  /** staticBytes + savedBytes: what is compared with the budget. */
  bytes: number;
  /** Σ bytes(b_i) of the saved tensors alone. */
  savedBytes: number;
  /** Σ w_i · Err_i(b_i), the modelled squared error (uniform-noise model). */
  errorBound: number;
  feasible: boolean;
  explanation: string;
}

/** Bytes of E elements stored at b bits (codes plus fp32 group scales below 16 bits). */
export function storedBytes(elements: number, bits: Bits, group = DEFAULT_GROUP): number {
  if (bits === 32) return 4 * elements;
  if (bits === 16) return 2 * elements;
  return Math.ceil((elements * bits) / 8) + 4 * Math.ceil(elements / group);
}

/** Modelled E‖x − x̂‖² of E elements of range amax stored at b bits. */
export function noiseError(elements: number, bits: Bits, amax = 1): number {
  if (bits === 32) return 0;
  const s = bits === 16 ? amax * 2 ** -8 : amax / (2 ** (bits - 1) - 1);
  return (elements * s * s) / 12;
}

interface Point {
  bits: Bits;
  bytes: number;
  err: number;
}
interface Step {
  entry: number;
  k: number;
  to: Point;
  cost: number;
  ratio: number;
}

function validate(input: BudgetInput, choices: Bits[], group: number): void {
  const bad = (msg: string) => {
    throw new Error(`allocateBits: ${msg}`);
  };
  if (!choices.length || choices.some((b) => !BIT_CHOICES.includes(b))) bad(`choices must be a non-empty subset of 4, 8, 16, 32 (got ${choices})`);
  if (!Number.isInteger(group) || group < 1) bad(`group must be a positive integer (got ${group})`);
  for (const [k, v] of [['budgetBytes', input.budgetBytes], ['staticBytes', input.staticBytes]] as const) {
    if (!Number.isFinite(v) || v < 0) bad(`${k} must be a finite non-negative number (got ${v})`);
  }
  input.layers.forEach((e, i) => {
    const at = `entry ${i} (layer ${e.layer} ${e.kind})`;
    if (!Number.isInteger(e.elements) || e.elements < 0) bad(`${at}: elements must be a non-negative integer`);
    if (e.amax !== undefined && !(Number.isFinite(e.amax) && e.amax >= 0)) bad(`${at}: amax must be finite and ≥ 0`);
    if (e.weight !== undefined && !(Number.isFinite(e.weight) && e.weight >= 0)) bad(`${at}: weight must be finite and ≥ 0`);
    if (e.pinned !== undefined && !BIT_CHOICES.includes(e.pinned)) bad(`${at}: pinned must be 4, 8, 16 or 32`);
  });
}

/** The entry's non-dominated choices by bytes (strictly less error for strictly more bytes). */
function frontier(e: BudgetEntry, choices: Bits[], group: number): Point[] {
  const w = e.weight ?? 1;
  const pts = choices
    .map((bits) => ({ bits, bytes: storedBytes(e.elements, bits, group), err: w * noiseError(e.elements, bits, e.amax ?? 1) }))
    .sort((a, b) => a.bytes - b.bytes || a.err - b.err || a.bits - b.bits);
  const out: Point[] = [];
  for (const p of pts) if (!out.length || (p.err < out[out.length - 1].err && p.bytes > out[out.length - 1].bytes)) out.push(p);
  return out;
}

/** Lower convex hull steps from the cheapest point; ratios clamped non-increasing against rounding. */
function hullSteps(entry: number, pts: Point[]): Step[] {
  const steps: Step[] = [];
  let cur = 0;
  let last = Infinity;
  while (cur < pts.length - 1) {
    let best = -1;
    let bestRatio = -Infinity;
    for (let j = cur + 1; j < pts.length; j++) {
      const r = (pts[cur].err - pts[j].err) / (pts[j].bytes - pts[cur].bytes);
      if (r > bestRatio) {
        bestRatio = r;
        best = j;
      }
    }
    last = Math.min(last, bestRatio);
    steps.push({ entry, k: steps.length, to: pts[best], cost: pts[best].bytes - pts[cur].bytes, ratio: last });
    cur = best;
  }
  return steps;
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;

export function allocateBits(input: BudgetInput): BudgetResult {
  const choices = [...new Set(input.choices ?? BIT_CHOICES)].sort((a, b) => a - b) as Bits[];
  const group = input.group ?? DEFAULT_GROUP;
  validate(input, choices, group);
  const n = input.layers.length;
  const bits: Bits[] = new Array(n);
  const bytes: number[] = new Array(n);
  const steps: Step[] = [];
  input.layers.forEach((e, i) => {
    if (e.pinned !== undefined) {
      bits[i] = e.pinned;
      bytes[i] = storedBytes(e.elements, e.pinned, group);
      return;
    }
    const pts = frontier(e, choices, group);
    bits[i] = pts[0].bits;
    bytes[i] = pts[0].bytes;
    steps.push(...hullSteps(i, pts));
  });
  const sum = (a: number[]) => a.reduce((s, v) => s + v, 0);
  const minSaved = sum(bytes);
  const minTotal = input.staticBytes + minSaved;
  const pinned = input.layers.filter((e) => e.pinned !== undefined).length;

  const feasible = minTotal <= input.budgetBytes;
  if (feasible) {
    let left = input.budgetBytes - minTotal;
    const frozen = new Uint8Array(n);
    steps.sort((a, b) => b.ratio - a.ratio || a.entry - b.entry || a.k - b.k);
    for (const s of steps) {
      if (frozen[s.entry] || s.ratio <= 0) continue;
      if (s.cost <= left) {
        left -= s.cost;
        bits[s.entry] = s.to.bits;
        bytes[s.entry] = s.to.bytes;
      } else {
        frozen[s.entry] = 1;
      }
    }
  }
  const savedBytes = sum(bytes);
  const total = input.staticBytes + savedBytes;
  const errorBound = input.layers.reduce((s, e, i) => s + (e.weight ?? 1) * noiseError(e.elements, bits[i], e.amax ?? 1), 0);

  let explanation: string;
  if (!feasible) {
    explanation =
      `Budget ${input.budgetBytes} B (${mib(input.budgetBytes)}) is infeasible: at each tensor's cheapest allowed bits` +
      `${pinned ? ` (and ${pinned} pinned)` : ''} it needs at least ${minTotal} B (${mib(minTotal)}) = static ` +
      `${input.staticBytes} B + saved activations ${minSaved} B; short by ${minTotal - input.budgetBytes} B.`;
  } else {
    const counts = choices
      .concat(BIT_CHOICES.filter((b) => !choices.includes(b)))
      .map((b) => [b, bits.filter((x) => x === b).length] as const)
      .filter(([, c]) => c > 0)
      .map(([b, c]) => `${c}×${b}-bit`)
      .join(', ');
    const pct = input.budgetBytes > 0 ? ((100 * total) / input.budgetBytes).toFixed(1) : '100.0';
    explanation =
      `Uses ${mib(total)} of ${mib(input.budgetBytes)} (${pct}%): static ${mib(input.staticBytes)} + saved ` +
      `${mib(savedBytes)}. Bits: ${counts || 'no tensors'}${pinned ? ` (${pinned} pinned)` : ''}. ` +
      `Greedy by error reduction per byte from the cheapest bits; modelled Σw·E·s²/12 = ${errorBound.toExponential(3)}.`;
  }
  return { bits, bytes: total, savedBytes, errorBound, feasible, explanation };
}
