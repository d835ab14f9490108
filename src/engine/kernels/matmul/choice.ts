/**
 * Which choice a GEMM call runs: forced by name, else the picks tuned on this device (engine/tune:
 * the in-product tuner, a loaded cache, setTunedVariant), else the shipped table measured on this
 * GPU model (tables.ts), else one measured on another GPU of its vendor and architecture (a seed),
 * else the heuristic's cost model. Each call notes its source (engine/tune/store.ts), so a run can
 * say whether it ran tuned.
 */
import { adapterMatches } from '../../gpu/device';
import type { Runtime } from '../../gpu/runtime';
import { seedFamily } from '../../tune/adapter';
import { type ChoiceSource, noteChoice, setTunedPicks, tunedEntries, tunedPicks } from '../../tune/store';
import { MEASURED_TABLES } from './tables';
import {
  choiceName, type MatmulChoice, type MatmulShape, matmulWorkspaceBytes, parseChoice, shapeKey, splitCandidates, splitPlan, tryParseChoice,
} from './plan';
import { availableVariants, type LimitsLike, variantFits, variantThreads } from './variants';

/** WebGPU's guaranteed minimum limits: the heuristic's default when no device is at hand. */
const DEFAULT_LIMITS: LimitsLike = {
  maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupSizeX: 256,
};

export interface HeuristicOptions {
  /** Threads resident on the GPU at once (65536 ≈ an H100/H200 with an 8×8 micro tile's registers). */
  parallelThreads?: number;
  /** Split-K workspace available to the call (default 0: one pass only). */
  workspaceBytes?: number;
}

/**
 * Cost model, in units of one thread's FMA time: the GPU holds `parallelThreads` resident threads
 * and runs the tiles (times the K slices) in waves; a wave costs one tile's per-thread work over
 * the variant's efficiency. Big tiles win on big problems (fewer bytes per FLOP), small tiles when
 * big ones would leave the GPU idle or pad an awkward N (the vocab-65 GEMMs pick 128×32), and
 * split-K when even small tiles are few and K is long (the dW GEMMs). A split pays for writing the
 * partials and reading them back, ~0.001 units per float at an H200's ratio of FMA rate to memory
 * bandwidth (16896 FMA and ~2000 B per clock, 65536 threads), plus ~900 units (about 2 µs: one more
 * dispatch and its barrier).
 */
export function chooseMatmulVariant(shape: MatmulShape, limits: LimitsLike = DEFAULT_LIMITS, opts: HeuristicOptions = {}): string {
  let best = '';
  let bestCost = Infinity;
  for (const c of heuristicCosts(shape, limits, opts)) {
    if (c.cost < bestCost * (1 - 1e-9)) {
      bestCost = c.cost;
      best = c.name;
    }
  }
  if (!best) throw new Error('matmul: no variant fits this device\'s limits');
  return best;
}

/** The cost model's figure for every one-pass and split-K choice that fits (in variant order). */
export function heuristicCosts(shape: MatmulShape, limits: LimitsLike = DEFAULT_LIMITS, opts: HeuristicOptions = {}): { name: string; cost: number }[] {
  const P = opts.parallelThreads ?? 65536;
  const out: { name: string; cost: number }[] = [];
  for (const v of availableVariants(limits)) {
    // Register slots: a micro tile wider than 8×8 holds as many accumulators per tile as the 8×8
    // one and feeds the FMA units from its extra independent sums (Hopper's tuned picks are 8×16).
    const threads = Math.max(variantThreads(v), (v.BM * v.BN) / 64);
    const tiles = Math.ceil(shape.M / v.BM) * Math.ceil(shape.N / v.BN);
    for (const S of [1, ...splitCandidates(shape, v, opts.workspaceBytes ?? 0, P)]) {
      const { kChunk, parts } = splitPlan(shape.K, v.BK, S);
      const waves = Math.ceil((tiles * parts) / Math.max(1, Math.floor(P / threads)));
      const reduce = parts > 1 ? 0.001 * (parts + 1) * shape.M * shape.N + 900 : 0;
      const cost = (waves * v.BM * v.BN * Math.min(kChunk, Math.max(shape.K, v.BK))) / threads / v.eff + reduce;
      out.push({ name: choiceName(v.name, parts), cost });
    }
  }
  return out;
}

// ---- picks set for this device ---------------------------------------------------------------

/** The choice tuned for this shape on this device (its best, with any workspace), if any. */
export function tunedVariant(rt: Runtime, s: MatmulShape): string | undefined {
  return tunedPicks(rt.device, 'matmul', shapeKey(s))?.[0];
}

/** Sets one choice as this device's pick for a shape (a ladder of one). */
export function setTunedVariant(rt: Runtime, s: MatmulShape, name: string): void {
  parseChoice(name);
  setTunedPicks(rt.device, 'matmul', shapeKey(s), [name]);
}

/** The picks so far as plain JSON (shapeKey → best choice), to save next to a run's config. */
export function tunedTable(rt: Runtime): Record<string, string> {
  return Object.fromEntries(Object.entries(tunedEntries(rt.device, 'matmul')).map(([k, v]) => [k, v[0]]));
}

/**
 * The pick of a shipped table for this device's adapter: one measured on this GPU model (`table`),
 * else one whose `seeds` names this adapter's vendor and architecture (`seed`); its best, else the
 * fastest of its ranked choices that `fits` (the workspace the call has).
 */
export function measuredChoice(rt: Runtime, s: MatmulShape, fits: (choice: string) => boolean = () => true): { name: string; source: 'table' | 'seed' } | undefined {
  const key = shapeKey(s);
  const family = seedFamily(rt.gpu.adapterInfo);
  for (const source of ['table', 'seed'] as const) {
    for (const t of MEASURED_TABLES) {
      const applies = source === 'table' ? adapterMatches(rt.gpu, t.match) : family !== null && t.seeds === family && !adapterMatches(rt.gpu, t.match);
      if (!applies) continue;
      const name = [t.table[key], ...(t.ranked?.[key] ?? [])].find((c) => c !== undefined && fits(c));
      if (name !== undefined) return { name, source };
    }
  }
  return undefined;
}

/** measuredChoice's name. */
export function measuredVariant(rt: Runtime, s: MatmulShape, fits: (choice: string) => boolean = () => true): string | undefined {
  return measuredChoice(rt, s, fits)?.name;
}

/** Restores saved picks; names that parse and fit this device's limits only (a table from another GPU). */
export function loadTunedTable(rt: Runtime, table: Record<string, string>): void {
  for (const [key, name] of Object.entries(table)) {
    const c = tryParseChoice(name);
    if (c && variantFits(c.variant, rt.device.limits)) setTunedPicks(rt.device, 'matmul', key, [name]);
  }
}

/**
 * The choice for a call: forced (args.variant), else the pick tuned on this device, else a measured
 * table's for this GPU model (the fastest measured choice whose workspace the call has), else the
 * heuristic. A split choice needs the workspace: forced without
 * enough of it is an error; a tuned or measured one is passed over for the next source (a table
 * tuned with a workspace, used without one).
 */
export function pickChoice(rt: Runtime, args: MatmulShape & { label: string; variant?: string }, wsBytes: number): MatmulChoice {
  const fits = (name: string) => matmulWorkspaceBytes(args, name) <= wsBytes;
  const key = shapeKey(args);
  const made = (name: string, source: ChoiceSource) => {
    noteChoice(rt.device, 'matmul', key, source);
    return parseChoice(name);
  };
  if (args.variant !== undefined) {
    parseChoice(args.variant);
    if (!fits(args.variant)) {
      throw new Error(`${args.label}: ${args.variant} needs a workspace of ${matmulWorkspaceBytes(args, args.variant)} bytes, have ${wsBytes}`);
    }
    return made(args.variant, 'forced');
  }
  const usable = (name: string) => {
    const c = tryParseChoice(name);
    return c !== undefined && fits(name) && variantFits(c.variant, rt.device.limits);
  };
  // A stale entry (a variant since renamed) or one over this device's limits is passed over.
  const tuned = tunedPicks(rt.device, 'matmul', key)?.find(usable);
  if (tuned !== undefined) return made(tuned, 'tuned');
  const measured = measuredChoice(rt, args, usable);
  if (measured) return made(measured.name, measured.source);
  return made(chooseMatmulVariant(args, rt.device.limits, { workspaceBytes: wsBytes }), 'heuristic');
}

/**
 * The choice a call of this shape runs with `workspaceBytes` of split-K workspace (0: what a plain
 * matmul() runs): tuned on this device, else the measured table's, else the heuristic's.
 */
export function matmulChoice(rt: Runtime, s: MatmulShape, workspaceBytes = 0): string {
  return pickChoice(rt, { label: 'matmulChoice', ...s }, workspaceBytes).name;
}
