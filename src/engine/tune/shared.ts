/**
 * Tuning tables shared by the members of a training group on the same adapter (issue 36): the
 * table a member offers (its own current entries, never picks it got from a peer), how a received
 * entry is judged (hostile until checked: spelling, sizes, a finite time, every pick a candidate of
 * this build for that shape within this adapter's limits), and the check on the device before a
 * shared pick is used (the tuner's own check against the reference). A received pick only ever
 * names one of this build's candidates, fills only a shape the cache lacks, and gives way to this
 * member's own tune: a hostile table can at most pick a slower valid kernel for an untuned shape.
 * The group's side (wire format, chunking, per-peer bounds) is src/parallel/dp/tune-share.ts;
 * this file knows no peers.
 */
import type { Runtime } from '../gpu/runtime';
import { type AttnTile, attnTileNamed } from '../kernels/attention/tables';
import { type MatmulShape, matmulWorkspaceBytes, parseChoice, splitCandidates } from '../kernels/matmul/plan';
import { type AdapterKey, adapterId, adapterKeyOf } from './adapter';
import { attentionProblem, checkAttention } from './attention';
import { keyProblem, MEMBER_ID, type TuneCache } from './cache';
import { codeHash } from './families';
import { checkMatmulChoice, matmulCandidateProblem } from './gemm';
import { hashText } from './hash';
import type { AttentionKernel, TuneJob } from './jobs';
import { type KernelFamily, setTunedPicks } from './store';

/** The families whose picks are shared: those whose candidates and check this file knows (others are neither sent nor taken). */
const SHARED_FAMILIES = ['matmul', 'attention'] as const;
type SharedFamily = (typeof SHARED_FAMILIES)[number];
const isShared = (f: string): f is SharedFamily => (SHARED_FAMILIES as readonly string[]).includes(f);

/** Most picks of one shared entry (a GEMM's ladder is a few; the rest is never read). */
export const MAX_SHARED_PICKS = 8;

export interface SharedTuneEntry {
  key: string;
  picks: string[];
  /** The sender's median ms of its first pick (shown only; never trusted for a choice). */
  ms: number;
}

export interface SharedTuneFamily {
  /** As received: a name this build may not know (then the family's entries are dropped). */
  family: string;
  codeHash: string;
  entries: SharedTuneEntry[];
}

/** A member's table as it crosses the wire: its adapter's digest and, per kernel family, its code hash and entries. */
export interface SharedTuneTable {
  adapter: string;
  families: SharedTuneFamily[];
}

/** The adapter's digest a shared table carries (the adapter key is no secret: a table claiming ours is still checked). */
export function adapterDigest(a: AdapterKey): string {
  return hashText(adapterId(adapterKeyOf(a)));
}

/** What this member offers its group: its own current entries for its adapter (shared ones are not passed on). */
export function shareableTable(cache: TuneCache, adapter: AdapterKey): SharedTuneTable {
  const families: SharedTuneFamily[] = [];
  for (const f of SHARED_FAMILIES) {
    const entries = Object.entries(cache.current(adapter, f)).filter(([, e]) => e.sharedBy === undefined)
      .map(([key, e]) => ({ key, picks: e.picks.slice(0, MAX_SHARED_PICKS), ms: e.ms }));
    if (entries.length) families.push({ family: f, codeHash: codeHash(f), entries });
  }
  return { adapter: adapterDigest(adapter), families };
}

function matmulShapeOf(key: string): MatmulShape {
  const m = /^(\d+)x(\d+)x(\d+)([NT])([NT])$/.exec(key)!;
  return { M: Number(m[1]), N: Number(m[2]), K: Number(m[3]), transA: m[4] === 'T', transB: m[5] === 'T' };
}

function attentionOf(key: string): { kernel: AttentionKernel; D: number } {
  const [kernel, d] = key.split('/');
  return { kernel: kernel as AttentionKernel, D: Number(d.slice(1)) };
}

const PASS_OF: Record<AttentionKernel, 'fwd' | 'dq' | 'dkdv'> = { fwd: 'fwd', dq: 'dq', dkdv: 'dkdv', fwdI8: 'fwd', dkdvI8: 'dkdv', dkdvDp8: 'dkdv' };

/** Why one pick of a shared entry is not a candidate of this build for its shape on this adapter, or null. */
function pickProblem(rt: Runtime, family: SharedFamily, key: string, pick: string): string | null {
  if (family === 'matmul') {
    const s = matmulShapeOf(key);
    let c;
    try {
      c = parseChoice(pick);
    } catch {
      return `'${pick.slice(0, 64)}' is no GEMM kernel of this build`;
    }
    // The shape's own limits and candidates; the call's workspace is the chooser's to check at use.
    const limits = matmulCandidateProblem(rt.device.limits, s, pick, matmulWorkspaceBytes(s, pick));
    if (limits) return `'${pick}' ${limits}`;
    if (c.splitK > 1 && !splitCandidates(s, c.variant, Number.MAX_SAFE_INTEGER).includes(c.splitK)) return `'${pick}' is no split-K candidate for ${key}`;
    return null;
  }
  const { kernel, D } = attentionOf(key);
  const tile = attnTileNamed(PASS_OF[kernel], pick);
  if (!tile) return `'${pick.slice(0, 64)}' is no ${kernel} attention tile of this build`;
  const p = attentionProblem(rt, kernel, tile, D);
  return p ? `'${pick}' ${p}` : null;
}

/** Why a received entry cannot be taken (null: it can, pending its check on the device before use). */
export function sharedEntryProblem(rt: Runtime, family: KernelFamily, e: SharedTuneEntry): string | null {
  if (!isShared(family)) return `${family} picks are not shared`;
  const k = keyProblem(family, e.key);
  if (k) return k;
  if (!Number.isFinite(e.ms) || e.ms < 0) return `time ${e.ms} ms is not a finite non-negative number`;
  if (e.picks.length === 0 || e.picks.length > MAX_SHARED_PICKS) return `${e.picks.length} picks (1 to ${MAX_SHARED_PICKS})`;
  if (new Set(e.picks).size !== e.picks.length) return 'a pick listed twice';
  if (family === 'matmul' ? /(^|x)0+x|x0+[NT]/.test(e.key) : /\/D0+$/.test(e.key)) return `'${e.key}' has a dimension of 0`;
  try {
    for (const p of e.picks) {
      const why = pickProblem(rt, family, e.key, p);
      if (why) return why;
    }
  } catch (err) {
    return `not a candidate here (${(err as Error).message.slice(0, 200)})`;
  }
  return null;
}

export interface SharedTableOutcome {
  /** Entries taken into the cache (shapes it lacked). */
  added: string[];
  /** Set when the whole table does not apply here (another adapter): honest, ignored, nobody named. */
  ignored?: string;
  /** Families of another code (another build): ignored likewise. */
  otherCode: string[];
  /** Entries refused, with why: the sender is named for each. */
  dropped: { key: string; why: string }[];
}

/**
 * Takes a member's table into this member's cache: nothing when it is for another adapter; a
 * family of other kernel code is passed over; each entry is judged (sharedEntryProblem) and, when
 * it passes and the cache lacks the shape, recorded as shared by `from`. Never throws on the table.
 */
export function adoptSharedTable(rt: Runtime, cache: TuneCache, table: SharedTuneTable, from: string): SharedTableOutcome {
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  const out: SharedTableOutcome = { added: [], otherCode: [], dropped: [] };
  if (!MEMBER_ID.test(from)) throw new Error(`tune: '${from.slice(0, 40)}' is not a member id`);
  if (table.adapter !== adapterDigest(adapter)) return { ...out, ignored: 'a table for another adapter (vendor, architecture, device, driver)' };
  const seen = new Set<string>();
  for (const fam of table.families) {
    if (!isShared(fam.family)) {
      out.dropped.push({ key: `${fam.family.slice(0, 16)}/*`, why: `unknown kernel family '${fam.family.slice(0, 16)}'` });
      continue;
    }
    const family = fam.family;
    if (fam.codeHash !== codeHash(family)) {
      out.otherCode.push(family);
      continue;
    }
    for (const e of fam.entries) {
      const id = `${family}:${e.key}`;
      const why = seen.has(id) ? 'listed twice' : sharedEntryProblem(rt, family, e);
      seen.add(id);
      if (why) {
        out.dropped.push({ key: `${family} ${e.key.slice(0, 64)}`, why });
        continue;
      }
      const entry = { picks: [...e.picks], ms: e.ms, candidates: 0, at: new Date().toISOString(), sharedBy: from };
      if (cache.putShared(adapter, family, e.key, entry)) out.added.push(`${family} ${e.key}`);
    }
  }
  return out;
}

/** Whether the cache holds any entry a member shared for this adapter (under the current code). */
export function hasSharedEntries(cache: TuneCache, adapter: AdapterKey): boolean {
  return SHARED_FAMILIES.some((f) => Object.values(cache.current(adapter, f)).some((e) => e.sharedBy !== undefined));
}

export interface SharedPicksOutcome {
  /** Choices whose shared picks passed their check and now apply on this device, with the member that shared them. */
  applied: { key: string; from: string }[];
  /** Shared entries none of whose picks passed (dropped from the cache). */
  failed: { key: string; from: string; why: string }[];
}

/**
 * Before a run builds its model: the cache's shared entries for this run's choices are checked on
 * the device as the tuner checks a candidate (limits, then the reference), and their passing picks
 * applied (marked shared, for the run's tuning status); an entry with none passing is dropped from
 * the cache. Entries tuned here are applied by TuneCache.applyTo.
 */
export async function applySharedPicks(rt: Runtime, cache: TuneCache, jobs: readonly TuneJob[]): Promise<SharedPicksOutcome> {
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  const out: SharedPicksOutcome = { applied: [], failed: [] };
  for (const j of jobs) {
    if (!isShared(j.family)) continue;
    const e = cache.get(adapter, j.family, j.key);
    if (!e?.sharedBy) continue;
    const passed: string[] = [];
    let why = '';
    for (const pick of e.picks) {
      let problem: string | null;
      try {
        problem = pickProblem(rt, j.family, j.key, pick) ?? await checkPick(rt, j, pick);
      } catch (err) {
        problem = `does not build here: ${(err as Error).message.slice(0, 200)}`;
      }
      if (problem) why ||= problem;
      else passed.push(pick);
    }
    if (passed.length) {
      setTunedPicks(rt.device, j.family, j.key, passed, e.sharedBy);
      out.applied.push({ key: j.key, from: e.sharedBy });
    } else {
      cache.drop(adapter, j.family, j.key);
      out.failed.push({ key: j.key, from: e.sharedBy, why });
    }
  }
  return out;
}

function checkPick(rt: Runtime, j: TuneJob, pick: string): Promise<string | null> {
  if (j.family === 'matmul') return checkMatmulChoice(rt, pick, j.shape);
  if (j.family === 'attention') return checkAttention(rt, j.kernel, j.shape, attnTileNamed(PASS_OF[j.kernel], pick) as AttnTile);
  return Promise.resolve(`${(j as { family: string }).family} picks are not shared`);
}
