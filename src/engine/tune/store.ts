/**
 * What this device was tuned to and where each kernel choice came from. A leaf module: the kernels'
 * choosers (matmul/choice.ts, attention) read the tuned picks and note their source here, and the
 * tuner (./tuner.ts) and the cache (./cache.ts) write the picks, so neither imports the other.
 * Keyed by GPUDevice, as the device's pipelines are: a new device starts untuned.
 */

/** Kernel families whose choices are tuned; each has its own code hash (./families.ts). */
export const KERNEL_FAMILIES = ['matmul', 'attention', 'f16gemm', 'f16attn', 'i8tc', 'i8quant'] as const;
export type KernelFamily = (typeof KERNEL_FAMILIES)[number];

/**
 * Where a choice came from: forced by the caller, tuned on this device, a shipped table measured on
 * this GPU model (`table`) or on another of its vendor and architecture (`seed`), or the heuristic.
 */
export type ChoiceSource = 'forced' | 'tuned' | 'table' | 'seed' | 'heuristic';

interface DeviceStore {
  /** `${family}:${key}` → picks, best first (a GEMM's ladder for ever smaller workspaces; an attention tile's name). */
  tuned: Map<string, readonly string[]>;
  /** `${family}:${key}` → the source of the choice last made for it. */
  made: Map<string, ChoiceSource>;
  /** `${family}:${key}` → the member whose shared table gave its tuned picks (verified here first: tune/shared.ts). */
  sharedBy: Map<string, string>;
}

const stores = new WeakMap<object, DeviceStore>();

function storeOf(device: object): DeviceStore {
  let s = stores.get(device);
  if (!s) stores.set(device, (s = { tuned: new Map(), made: new Map(), sharedBy: new Map() }));
  return s;
}

/** The picks tuned for a choice on this device (best first), if any. */
export function tunedPicks(device: object, family: KernelFamily, key: string): readonly string[] | undefined {
  return stores.get(device)?.tuned.get(`${family}:${key}`);
}

/** Sets a choice's tuned picks; `sharedBy`: they came from that group member's table (verified on this device first). */
export function setTunedPicks(device: object, family: KernelFamily, key: string, picks: readonly string[], sharedBy?: string): void {
  if (picks.length === 0) throw new Error(`tune: no picks for ${family} ${key}`);
  const s = storeOf(device);
  s.tuned.set(`${family}:${key}`, [...picks]);
  if (sharedBy === undefined) s.sharedBy.delete(`${family}:${key}`);
  else s.sharedBy.set(`${family}:${key}`, sharedBy);
}

/** Every tuned pick of a family on this device: key → picks. */
export function tunedEntries(device: object, family: KernelFamily): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of stores.get(device)?.tuned ?? []) if (k.startsWith(`${family}:`)) out[k.slice(family.length + 1)] = [...v];
  return out;
}

/** Forgets this device's tuned picks (of one family, or all). */
export function clearTuned(device: object, family?: KernelFamily): void {
  const s = stores.get(device);
  if (!s) return;
  for (const k of [...s.tuned.keys()]) {
    if (!family || k.startsWith(`${family}:`)) {
      s.tuned.delete(k);
      s.sharedBy.delete(k);
    }
  }
}

/** Called by a chooser each time it settles a choice. */
export function noteChoice(device: object, family: KernelFamily, key: string, source: ChoiceSource): void {
  storeOf(device).made.set(`${family}:${key}`, source);
}

export interface MadeChoice {
  family: KernelFamily;
  key: string;
  source: ChoiceSource;
  /** A tuned choice whose picks came from this group member's shared table. */
  sharedBy?: string;
}

/** The choices made on this device since the last resetChoices (one per family and key, the last). */
export function madeChoices(device: object): MadeChoice[] {
  const s = stores.get(device);
  return [...(s?.made ?? [])].map(([k, source]) => {
    const i = k.indexOf(':');
    const by = source === 'tuned' ? s?.sharedBy.get(k) : undefined;
    return { family: k.slice(0, i) as KernelFamily, key: k.slice(i + 1), source, ...(by !== undefined ? { sharedBy: by } : {}) };
  });
}

/** Starts a new record of choices (e.g. before a model is built, so its report is its own). */
export function resetChoices(device: object): void {
  stores.get(device)?.made.clear();
}

/**
 * How a run's kernels were chosen: `tuned` when every choice that was not forced came from this
 * device's tuning, `partly tuned` when some did, `defaults` when none did; `shippedTable` when some
 * came from a shipped table (this GPU model's, or a seed from its architecture).
 */
export interface TuningStatus {
  status: 'tuned' | 'partly tuned' | 'defaults';
  counts: Record<ChoiceSource, number>;
  shippedTable: boolean;
  /** Tuned choices whose picks a group member shared (verified on this device), and those members. */
  shared: number;
  sharedBy: string[];
  /**
   * One line for a person: "tuned", "tuned (3 of 9 shared by peer X)", "partly tuned (5 of 9
   * choices; the rest: shipped table, heuristic)", "defaults (shipped table)".
   */
  label: string;
}

export function tuningStatus(choices: readonly MadeChoice[]): TuningStatus {
  const counts: Record<ChoiceSource, number> = { forced: 0, tuned: 0, table: 0, seed: 0, heuristic: 0 };
  const sharedBy = new Set<string>();
  let shared = 0;
  for (const c of choices) {
    counts[c.source]++;
    if (c.sharedBy !== undefined) {
      shared++;
      sharedBy.add(c.sharedBy);
    }
  }
  const free = counts.tuned + counts.table + counts.seed + counts.heuristic;
  const status = free > 0 && counts.tuned === free ? 'tuned' : counts.tuned > 0 ? 'partly tuned' : 'defaults';
  const shippedTable = counts.table + counts.seed > 0;
  const rest = [counts.table ? 'shipped table' : '', counts.seed ? 'shipped table of this architecture' : '', counts.heuristic ? 'heuristic' : '']
    .filter(Boolean).join(', ');
  const peers = `shared by peer ${[...sharedBy].join(', ')}`;
  const sharedPart = shared === 0 ? '' : shared === free ? peers : `${shared} of ${free} ${peers}`;
  const label = status === 'tuned' ? `tuned${sharedPart ? ` (${sharedPart})` : ''}`
    : status === 'partly tuned' ? `partly tuned (${counts.tuned} of ${free} choices${shared ? `, ${shared} ${peers}` : ''}; the rest: ${rest})`
      : `defaults${rest ? ` (${rest})` : ''}`;
  return { status, counts, shippedTable, shared, sharedBy: [...sharedBy], label };
}
