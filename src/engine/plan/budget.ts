/**
 * AGoQ's memory-budget allocation applied to a model: given `scheme.budget_bytes`, choose the bits
 * of every (layer, saved kind) cell from {4, 8, 32} so the run's planned total fits, minimising the
 * quantization error bound (budget.ts). Attention kinds keep the scheme's own setting (AGoQ keeps
 * them at 16 or 32 bits: bf16, f16 or fp32), pinned at its bits. The allocator's
 * byte model is additive; the real plan also has live copies, so the budget is tightened by the
 * measured overshoot (doubling while the choice does not change) and re-solved until the real plan fits.
 */
import type { MemReport } from '../gpu/memory';
import { LAYER_SAVED, FINAL_SAVED, type LayerSavedKey, layerSizes, SAVED_KIND_OF } from '../model/plan';
import { resolvePlan, type RunPlan } from './run-plan';
import type { ModelConfig } from '../model/config';
import { allocateBits, type Bits, type BudgetEntry } from '../scheme/budget';
import { FP32, isHalfFormat, layerScheme, type QuantSpec, type SavedKind, type SavedSpec, savedSpec, type Scheme } from '../scheme/scheme';

const PINNED_KINDS: SavedKind[] = ['attn_qkv', 'attn_out'];

export interface BudgetChoice {
  /** bits[layer][kind] as chosen (32 = fp32). */
  bits: Record<number, Partial<Record<SavedKind, number>>>;
  planned: MemReport;
  budget: number;
  explanation: string;
}

/**
 * The allocated saved kinds that are also a forward GEMM's X (compute-plan.ts GEMM_INPUT_SAVED;
 * attn_out is pinned): at 8 bits in a layer whose forward is INT8 they are stored per row, the
 * GEMM's own X format, so one set of codes serves both.
 */
const GEMM_INPUT_KINDS: SavedKind[] = ['qkv_input', 'mlp_input', 'down_input'];

function specFor(bits: number, group: number, gemmX = false): QuantSpec {
  if (bits >= 32) return FP32;
  if (bits === 8 && gemmX) return { format: 'int8', granularity: 'row', group, rounding: 'nearest' };
  return { format: bits === 8 ? 'int8' : 'int4', granularity: 'group', group, rounding: 'nearest' };
}

function bitsOf(q: SavedSpec): Bits {
  return q.format === 'fp32' ? 32 : isHalfFormat(q.format) ? 16 : q.format === 'int4' ? 4 : 8;
}

/** Elements per (layer, kind) cell; the final norm's tensors belong to the last layer's cells. */
function cellElements(plan: RunPlan): Map<string, number> {
  const d = plan.dims;
  const size = layerSizes(d);
  const out = new Map<string, number>();
  const add = (l: number, key: LayerSavedKey) => {
    const kind = SAVED_KIND_OF[key];
    if (!kind) return;
    const k = `${l}:${kind}`;
    out.set(k, (out.get(k) ?? 0) + size[key][0]);
  };
  for (let l = 0; l < d.L; l++) for (const key of LAYER_SAVED) add(l, key);
  for (const key of FINAL_SAVED) add(d.L - 1, key);
  return out;
}

export function applyBits(scheme: Scheme, bits: BudgetChoice['bits'], group: number): Scheme {
  const layers: Scheme['layers'] = { ...scheme.layers };
  for (const [l, kinds] of Object.entries(bits)) {
    const saved: Partial<Record<SavedKind, SavedSpec>> = { ...(layers[l]?.saved ?? {}) };
    const int8Forward = layerScheme(scheme, Number(l)).compute.forward === 'int8';
    for (const [kind, b] of Object.entries(kinds)) {
      // A cell at its own bits keeps its own spec (a pinned bf16 or f16 attention cell stays so: specFor has no 16).
      const own = savedSpec(scheme, Number(l), kind as SavedKind);
      saved[kind as SavedKind] = bitsOf(own) === b && PINNED_KINDS.includes(kind as SavedKind) ? own : specFor(b as number, group, int8Forward && GEMM_INPUT_KINDS.includes(kind as SavedKind));
    }
    layers[l] = { ...(layers[l] ?? {}), saved };
  }
  return { ...scheme, layers, budget_bytes: undefined };
}

/**
 * Resolves `scheme.budget_bytes` into per-layer bit-widths. `plan(scheme)` must return the run's
 * planned bytes under a scheme (the trainer's planMemory), so the answer is checked against the same
 * numbers the allocator will allocate.
 */
export function resolveBudget(
  scheme: Scheme, cfg: ModelConfig, B: number, T: number, plan: (s: Scheme) => MemReport,
): { scheme: Scheme; choice: BudgetChoice } {
  const budget = scheme.budget_bytes;
  if (budget === undefined) throw new Error('resolveBudget: the scheme has no budget_bytes');
  const group = scheme.layer.saved.norm_input?.group ?? 128;
  const shape = resolvePlan(cfg, B, T, { scheme: { ...scheme, budget_bytes: undefined } });
  const cells = cellElements(shape);
  const keys = [...cells.keys()];
  const entries: BudgetEntry[] = keys.map((k) => {
    const [l, kind] = k.split(':') as [string, SavedKind];
    const pinned = PINNED_KINDS.includes(kind) ? bitsOf(shape.layers[Number(l)].savedSpecs[kind]) : undefined;
    return { layer: Number(l), kind, elements: cells.get(k)!, rowLength: 1, pinned };
  });
  const all32: BudgetChoice['bits'] = {};
  for (const e of entries) (all32[e.layer] ??= {})[e.kind as SavedKind] = 32;
  const allFp32 = applyBits(scheme, all32, group);
  const fp32Saved = entries.reduce((s, e) => s + e.elements * 4, 0);
  const staticBytes = plan(allFp32).total - fp32Saved;
  let target = budget;
  let shrink = 0;
  for (let iter = 0; iter < 24; iter++) {
    const r = allocateBits({ layers: entries, budgetBytes: target, staticBytes, choices: [4, 8, 32], group });
    const bits: BudgetChoice['bits'] = {};
    entries.forEach((e, i) => {
      (bits[e.layer] ??= {})[e.kind as SavedKind] = r.bits[i];
    });
    const resolved = applyBits(scheme, bits, group);
    const planned = plan(resolved);
    if (!r.feasible && iter === 0) {
      throw new Error(`memory budget ${budget} bytes is infeasible: ${r.explanation}`);
    }
    if (planned.total <= budget) {
      return { scheme: resolved, choice: { bits, planned, budget, explanation: r.explanation } };
    }
    // The choice is discrete: when shrinking by the overshoot does not change it, shrink faster.
    shrink = Math.max(planned.total - budget, 2 * shrink);
    target -= shrink;
    if (target < staticBytes) break;
  }
  throw new Error(`memory budget ${budget} bytes cannot be met even with every non-attention activation at 4 bits`);
}

