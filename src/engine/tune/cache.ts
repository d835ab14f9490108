/**
 * The tuning cache: per adapter (vendor, architecture, device, description) and kernel family, the
 * code hash the family had when tuned and the picks per choice key. Plain JSON, the same in Node (a
 * file under the user's cache directory, cli/tune-cache.ts) and the page (IndexedDB,
 * state/tune-store.ts), exportable and importable: an imported file is validated as hostile input
 * (structure, sizes, key and name spellings) and refused whole with one clear error when malformed.
 * Picks whose kernel code changed since (another code hash) are kept but not applied, and replaced
 * when tuned again. An entry a group member shared (`sharedBy`, ./shared.ts) fills only a shape the
 * cache lacked, is applied only after its check on the device, and is replaced by this member's own tune.
 */
import { z } from 'zod';
import { parseChoice } from '../kernels/matmul/plan';
import { f16TcSpecOfPick } from '../kernels/matmul-f16/plan';
import { i8TcPickParse } from '../kernels/qgemm/tc';
import { tqVariantNamed } from '../kernels/qgemm/block';
import { attnTileNamed, type AttentionPass } from '../kernels/attention/tables';
import { f16AttnBwdSpecsOfPick, f16AttnSpecOfPick } from '../kernels/attention/f16/picks';
import { type AdapterKey, adapterId, adapterKeyOf } from './adapter';
import { codeHash } from './families';
import { KERNEL_FAMILIES, type KernelFamily, setTunedPicks } from './store';

export const TUNE_CACHE_FORMAT = 'webgpu-quant-lab/tune-cache';
export const TUNE_CACHE_VERSION = 1;

/** One tuned choice. */
export interface TuneEntry {
  /** Best first: for a GEMM the fastest choice, then the fastest for ever smaller split-K/stream-K workspaces down to one pass. */
  picks: string[];
  /** Median GPU ms of the best pick. */
  ms: number;
  /** Candidates timed (after the limits and the check against the reference). */
  candidates: number;
  /** Workspace bytes the GEMM was tuned with (the ladder covers any call with up to this much). */
  workspaceBytes?: number;
  /** When it was tuned (ISO). */
  at: string;
  /** The group member whose table gave it (not tuned here): verified on the device before each use, replaced by a tune. */
  sharedBy?: string;
}

export interface TuneFamilyEntries {
  codeHash: string;
  entries: Record<string, TuneEntry>;
}

export interface TuneAdapterEntry {
  adapter: AdapterKey;
  families: Partial<Record<KernelFamily, TuneFamilyEntries>>;
}

export interface TuneCacheData {
  format: typeof TUNE_CACHE_FORMAT;
  version: typeof TUNE_CACHE_VERSION;
  adapters: TuneAdapterEntry[];
}

// ---- validation --------------------------------------------------------------------------------

const MAX_ADAPTERS = 64;
const MAX_ENTRIES = 4096;
const MATMUL_KEY = /^\d{1,7}x\d{1,7}x\d{1,8}[NT]{2}$/;
const ATTN_KEY = /^(fwd|dq|dkdv|fwdI8|dkdvI8|dkdvDp8)\/D\d{1,4}$/;
/** An INT8 GEMM shape M×N×K (kernels/qgemm/tc.ts i8TcShapeKey). */
const I8_KEY = /^\d{1,7}x\d{1,7}x\d{1,8}$/;
/** A transposed INT8 quantizer's call: x [R, CN] in blocks of G rows or all of them (kernels/qgemm/block.ts i8QuantKey). */
const I8QUANT_KEY = /^\d{1,7}x\d{1,7}\/(all|\d{1,7})$/;
// 128: an f16 attention backward pick names two specs (dq's/dk-dv's).
const PICK = /^[A-Za-z0-9_/.]{1,128}$/;
/** An f16 attention call (kernels/attention/f16/picks.ts f16AttnTuneKey). */
const F16ATTN_KEY = /^(fwd|bwd)\/D\d{1,4}\/T\d{1,7}\/H\d{1,4}\/KV\d{1,4}\/B\d{1,6}\/causal$/;
/** A group member's id as the peers name it (src/peers/room/room.ts), in a shared entry. */
export const MEMBER_ID = /^[A-Za-z0-9_.:-]{1,128}$/;

const text = (max: number) => z.string().max(max);
const EntrySchema = z.strictObject({
  picks: z.array(z.string().regex(PICK, 'a pick is a kernel choice name')).min(1).max(64),
  ms: z.number().nonnegative().finite(),
  candidates: z.number().int().nonnegative().max(100000),
  workspaceBytes: z.number().int().nonnegative().max(2 ** 40).optional(),
  at: text(40),
  sharedBy: z.string().regex(MEMBER_ID, 'a member id').optional(),
});
const FamilySchema = z.strictObject({
  codeHash: z.string().regex(/^[0-9a-z-]{1,40}$/, 'a code hash'),
  entries: z.record(z.string().max(64), EntrySchema),
});
const AdapterSchema = z.strictObject({
  adapter: z.strictObject({ vendor: text(256), architecture: text(256), device: text(256), description: text(512) }),
  families: z.strictObject(Object.fromEntries(KERNEL_FAMILIES.map((f) => [f, FamilySchema.optional()])) as Record<KernelFamily, z.ZodOptional<typeof FamilySchema>>),
});
const CacheSchema = z.strictObject({
  format: z.literal(TUNE_CACHE_FORMAT),
  version: z.literal(TUNE_CACHE_VERSION),
  adapters: z.array(AdapterSchema).max(MAX_ADAPTERS),
});

export class TuneCacheError extends Error {}

/** Why a key is not spelled as a choice key of the family (null: it is). */
export function keyProblem(family: KernelFamily, key: string): string | null {
  return (family === 'attention' ? ATTN_KEY : family === 'f16attn' ? F16ATTN_KEY : family === 'i8tc' ? I8_KEY : family === 'i8quant' ? I8QUANT_KEY : MATMUL_KEY).test(key) ? null : `'${key.slice(0, 40)}' is not a ${family} choice key`;
}

/**
 * Parses and validates a tuning cache (text or parsed JSON): throws TuneCacheError naming the first
 * problem (not JSON, not a tuning cache, another version, a malformed field). Never trusts the input:
 * sizes are bounded and keys are checked against the spelling of choice keys (so no `__proto__`).
 */
export function parseTuneCache(input: unknown, what = 'tuning cache'): TuneCacheData {
  let raw = input;
  if (typeof input === 'string') {
    if (input.length > 16 << 20) throw new TuneCacheError(`${what}: larger than 16 MiB, not a tuning cache`);
    try {
      raw = JSON.parse(input);
    } catch (e) {
      throw new TuneCacheError(`${what}: not JSON (${(e as Error).message})`);
    }
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw new TuneCacheError(`${what}: not a tuning cache (expected a JSON object)`);
  const r = raw as Record<string, unknown>;
  if (r.format !== TUNE_CACHE_FORMAT) {
    throw new TuneCacheError(`${what}: not a tuning cache (its "format" is ${JSON.stringify(r.format ?? null)?.slice(0, 60)}, expected "${TUNE_CACHE_FORMAT}")`);
  }
  if (r.version !== TUNE_CACHE_VERSION) throw new TuneCacheError(`${what}: version ${JSON.stringify(r.version)?.slice(0, 20)} is not supported (this build reads version ${TUNE_CACHE_VERSION})`);
  // Keys are checked on the input as given (a schema's output may already have dropped `__proto__`).
  const adapters = Array.isArray(r.adapters) ? r.adapters : [];
  for (const [i, a] of adapters.entries()) {
    const fams = (a as { families?: unknown } | null)?.families;
    if (typeof fams !== 'object' || fams === null) continue;
    for (const f of KERNEL_FAMILIES) {
      const entries = Object.hasOwn(fams, f) ? (fams as Record<string, { entries?: unknown }>)[f]?.entries : undefined;
      if (typeof entries !== 'object' || entries === null) continue;
      for (const key of Object.keys(entries)) {
        const p = keyProblem(f, key);
        if (p) throw new TuneCacheError(`${what}: adapters.${i}.families.${f}: ${p}`);
      }
    }
  }
  const parsed = CacheSchema.safeParse(raw);
  if (!parsed.success) {
    const i = parsed.error.issues[0];
    throw new TuneCacheError(`${what}: ${i.path.join('.') || '(top)'}: ${i.message}`);
  }
  let count = 0;
  for (const a of parsed.data.adapters) {
    for (const f of KERNEL_FAMILIES) {
      for (const key of Object.keys(a.families[f]?.entries ?? {})) {
        const p = keyProblem(f, key);
        if (p) throw new TuneCacheError(`${what}: adapters.${parsed.data.adapters.indexOf(a)}.families.${f}: ${p}`);
        if (++count > MAX_ENTRIES) throw new TuneCacheError(`${what}: more than ${MAX_ENTRIES} entries`);
      }
    }
  }
  return rebuild(parsed.data as TuneCacheData);
}

/** A copy built from plain objects with null prototypes for the records (input keys never touch Object.prototype). */
function rebuild(d: TuneCacheData): TuneCacheData {
  return {
    format: TUNE_CACHE_FORMAT, version: TUNE_CACHE_VERSION,
    adapters: d.adapters.map((a) => ({
      adapter: adapterKeyOf(a.adapter),
      families: Object.fromEntries(KERNEL_FAMILIES.filter((f) => a.families[f]).map((f) => {
        const fam = a.families[f]!;
        const entries: Record<string, TuneEntry> = Object.create(null);
        for (const [k, e] of Object.entries(fam.entries)) entries[k] = { ...e, picks: [...e.picks] } as TuneEntry;
        return [f, { codeHash: fam.codeHash, entries }];
      })),
    })),
  };
}

// ---- the cache ---------------------------------------------------------------------------------

export function emptyTuneCache(): TuneCacheData {
  return { format: TUNE_CACHE_FORMAT, version: TUNE_CACHE_VERSION, adapters: [] };
}

/** Whether a pick names something this build can run (a stale name from an older build is passed over). */
export function pickKnown(family: KernelFamily, key: string, pick: string): boolean {
  // An f16 tensor-core layout's pick name (the subgroup size is the device's at use, not part of the name).
  if (family === 'f16gemm') return f16TcSpecOfPick(pick, 32) !== null;
  if (family === 'i8tc') return i8TcPickParse(pick) !== null;
  if (family === 'i8quant') return tqVariantNamed(pick) !== undefined;
  if (family === 'f16attn') {
    const D = Number(/\/D(\d+)\//.exec(key)?.[1]);
    return (key.startsWith('bwd/') ? f16AttnBwdSpecsOfPick(pick, D, 32) : f16AttnSpecOfPick(pick, D, 32)) !== null;
  }
  if (family === 'matmul') {
    try {
      parseChoice(pick);
      return true;
    } catch {
      return false;
    }
  }
  return attnTileNamed(key.startsWith('fwd') ? 'fwd' : (key.split('/')[0].startsWith('dq') ? 'dq' : 'dkdv') as AttentionPass, pick) !== undefined;
}

export class TuneCache {
  constructor(public data: TuneCacheData = emptyTuneCache()) {}

  static parse(input: unknown, what?: string): TuneCache {
    return new TuneCache(parseTuneCache(input, what));
  }

  toJSON(): TuneCacheData {
    return this.data;
  }

  /** The cache as a file's text. */
  serialize(): string {
    return JSON.stringify(this.data, null, 1) + '\n';
  }

  private adapterEntry(adapter: AdapterKey, create: boolean): TuneAdapterEntry | undefined {
    const id = adapterId(adapter);
    let a = this.data.adapters.find((x) => adapterId(x.adapter) === id);
    if (!a && create) this.data.adapters.push((a = { adapter: adapterKeyOf(adapter), families: {} }));
    return a;
  }

  /** The entries of a family for this adapter that apply to the current code (same hash). */
  current(adapter: AdapterKey, family: KernelFamily): Record<string, TuneEntry> {
    const f = this.adapterEntry(adapter, false)?.families[family];
    return f && f.codeHash === codeHash(family) ? f.entries : {};
  }

  /** The current entry of one choice, if any. */
  get(adapter: AdapterKey, family: KernelFamily, key: string): TuneEntry | undefined {
    return Object.hasOwn(this.current(adapter, family), key) ? this.current(adapter, family)[key] : undefined;
  }

  /** Records a tuned choice under the current code hash (entries of an older hash for this family are dropped). */
  put(adapter: AdapterKey, family: KernelFamily, key: string, entry: TuneEntry): void {
    const p = keyProblem(family, key);
    if (p) throw new TuneCacheError(`tune: ${p}`);
    const a = this.adapterEntry(adapter, true)!;
    const hash = codeHash(family);
    let f = a.families[family];
    if (!f || f.codeHash !== hash) a.families[family] = f = { codeHash: hash, entries: Object.create(null) as Record<string, TuneEntry> };
    f.entries[key] = entry;
  }

  /**
   * Records a group member's entry (./shared.ts, after its checks) for a choice this cache lacks under
   * the current code: never replaces an entry, tuned here or shared. Returns whether it was recorded.
   */
  putShared(adapter: AdapterKey, family: KernelFamily, key: string, entry: TuneEntry & { sharedBy: string }): boolean {
    if (this.get(adapter, family, key)) return false;
    this.put(adapter, family, key, entry);
    return true;
  }

  /** Forgets one entry (a shared pick that failed its check on the device). */
  drop(adapter: AdapterKey, family: KernelFamily, key: string): void {
    const f = this.adapterEntry(adapter, false)?.families[family];
    if (f && Object.hasOwn(f.entries, key)) delete f.entries[key];
  }

  /** Entries per family for this adapter: current (this code) and stale (tuned for other code). */
  counts(adapter: AdapterKey): { current: number; stale: number } {
    let current = 0;
    let stale = 0;
    for (const [f, fam] of Object.entries(this.adapterEntry(adapter, false)?.families ?? {})) {
      const n = Object.keys(fam.entries).length;
      if (fam.codeHash === codeHash(f as KernelFamily)) current += n;
      else stale += n;
    }
    return { current, stale };
  }

  /**
   * Merges another cache in: per adapter and family, entries of the same code hash are merged (the
   * later `at` wins); a family tuned for other code than ours keeps whichever is current.
   */
  merge(other: TuneCache | TuneCacheData): { added: number } {
    const data = other instanceof TuneCache ? other.data : other;
    let added = 0;
    for (const a of data.adapters) {
      const mine = this.adapterEntry(a.adapter, true)!;
      for (const f of KERNEL_FAMILIES) {
        const theirs = a.families[f];
        if (!theirs) continue;
        const ours = mine.families[f];
        const current = codeHash(f);
        if (!ours || (ours.codeHash !== theirs.codeHash && theirs.codeHash === current)) {
          mine.families[f] = { codeHash: theirs.codeHash, entries: Object.assign(Object.create(null), theirs.entries) };
          added += Object.keys(theirs.entries).length;
          continue;
        }
        if (ours.codeHash !== theirs.codeHash) continue;
        for (const [k, e] of Object.entries(theirs.entries)) {
          const have = Object.hasOwn(ours.entries, k) ? ours.entries[k] : undefined;
          if (!have || e.at > have.at) {
            ours.entries[k] = e;
            added++;
          }
        }
      }
    }
    return { added };
  }

  /**
   * Hands this adapter's current entries to a device (engine/tune/store.ts), where the kernels'
   * choosers read them: returns how many were applied. Picks this build does not know are dropped;
   * entries a member shared wait for their check on the device (./shared.ts applySharedPicks).
   */
  applyTo(device: object, adapter: AdapterKey): number {
    let n = 0;
    for (const f of KERNEL_FAMILIES) {
      for (const [key, e] of Object.entries(this.current(adapter, f))) {
        if (e.sharedBy !== undefined) continue;
        const picks = e.picks.filter((p) => pickKnown(f, key, p));
        if (picks.length === 0) continue;
        setTunedPicks(device, f, key, picks);
        n++;
      }
    }
    return n;
  }
}
