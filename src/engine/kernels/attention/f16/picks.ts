/**
 * Which f16 attention spec a call runs: per runtime, the specs enableF16Attention verified for each
 * head dim (./checks.ts), and the tuned picks (tune/f16-attention.ts, family 'f16attn'): their names,
 * and which of them serve a call (those that passed their check on that runtime).
 */
import type { Runtime } from '../../../gpu/runtime';
import { subgroupSize } from '../../qgemm/sgmat';
import { noteChoice, tunedPicks } from '../../../tune/store';
import type { Shape } from '../attention';
import { f16AttnSpecError, type F16AttnSpec } from './code';
import { f16AttnBwdPairError, f16AttnBwdSpecError } from './code-bwd';
import { F16_ATTN_BWD_LAYOUTS, F16_ATTN_LAYOUTS, f16AttnBwdLayoutPair, type F16AttnBwdSpecs } from './layouts';

// ---- choosing the path on a device -------------------------------------------------------------------

const enabled = new WeakMap<Runtime, Map<number, F16AttnSpec>>();

/** The spec verified for head dim D on this runtime (enableF16Attention), if any. */
export function f16AttentionSpec(rt: Runtime, D: number): F16AttnSpec | undefined {
  return enabled.get(rt)?.get(D);
}

const bwdEnabled = new WeakMap<Runtime, Map<number, F16AttnBwdSpecs>>();
/** Per head dim whose verified backward stores dS: the first verified one that does not, for calls with no dS scratch (TP). */
const bwdRecompute = new WeakMap<Runtime, Map<number, F16AttnBwdSpecs>>();

/** The runtime's verified forward spec per head dim (enableF16Attention fills it), made empty on first use: the runtime counts as probed (f16AttentionProbed). */
export function enabledSpecs(rt: Runtime): Map<number, F16AttnSpec> {
  const m = enabled.get(rt) ?? new Map<number, F16AttnSpec>();
  enabled.set(rt, m);
  return m;
}

/** The runtime's verified backward specs per head dim, made empty on first use (enableF16Attention fills it). */
export function enabledBwdSpecs(rt: Runtime): Map<number, F16AttnBwdSpecs> {
  const m = bwdEnabled.get(rt) ?? new Map<number, F16AttnBwdSpecs>();
  bwdEnabled.set(rt, m);
  return m;
}

/** The runtime's recomputing backward per head dim where the verified one stores dS (bwdRecompute), made empty on first use. */
export function enabledRecomputeSpecs(rt: Runtime): Map<number, F16AttnBwdSpecs> {
  const m = bwdRecompute.get(rt) ?? new Map<number, F16AttnBwdSpecs>();
  bwdRecompute.set(rt, m);
  return m;
}

/** The backward specs verified for head dim D on this runtime (enableF16Attention), if any. */
export function f16AttentionBackwardSpecs(rt: Runtime, D: number): F16AttnBwdSpecs | undefined {
  return bwdEnabled.get(rt)?.get(D);
}

/** The head dims with a verified f16 attention backward on this runtime. */
export function f16AttentionBackwardHeadDims(rt: Runtime): number[] {
  return [...(bwdEnabled.get(rt)?.keys() ?? [])].sort((x, y) => x - y);
}

/** The head dims with a verified f16 attention kernel on this runtime. */
export function f16AttentionHeadDims(rt: Runtime): number[] {
  return [...(enabled.get(rt)?.keys() ?? [])].sort((x, y) => x - y);
}

/** Whether enableF16Attention has run on this runtime (whatever it found). */
export function f16AttentionProbed(rt: Runtime): boolean {
  return enabled.has(rt);
}

/** Turns the path off again (benchmarks time both on one runtime); tuned picks wait for their checks again. */
export function disableF16Attention(rt: Runtime): void {
  enabled.delete(rt);
  bwdEnabled.delete(rt);
  bwdRecompute.delete(rt);
  verified.delete(rt);
}

// ---- tuned picks (tune/f16-attention.ts: family 'f16attn', per pass and shape) ------------------------

/** The tuning key of one f16 attention call: pass, head dim, context, query and KV heads, batch, causal (the kernel's only mask). */
export function f16AttnTuneKey(pass: 'fwd' | 'bwd', s: Shape): string {
  return `${pass}/D${s.D}/T${s.T}/H${s.nH}/KV${s.nKV}/B${s.B}/causal`;
}

/** Fields a pick leaves out: the head dim (in the tuning key), the subgroup size (the device's at use) and cfg (its first part). */
const PICK_OMITS = new Set(['D', 'sgSize', 'cfg']);

/**
 * The layout fields a pick may name: those of the layout lists (a new spec option joins by appearing
 * there); required: the sizes every layout sets (numbers: no default to fall back on).
 */
function pickFields(): { known: Set<string>; required: string[] } {
  const all: Record<string, unknown>[] = [...F16_ATTN_LAYOUTS, ...F16_ATTN_BWD_LAYOUTS.flatMap((l) => Object.values(f16AttnBwdLayoutPair(l)))];
  return { known: new Set(all.flatMap((l) => Object.keys(l))), required: Object.keys(all[0]).filter((k) => all.every((l) => typeof l[k] === 'number')) };
}

/**
 * A spec's name as a tuned pick (the tuning cache's picks are [A-Za-z0-9_/.]): its configuration, then
 * every other field but D and sgSize in name order, `name_value` (whole numbers, words) or `name` (true;
 * false and unset are left out), e.g. '16x16x16.BKV_64.PAD_8.load_direct.sgCount_4'. Generic over the spec's
 * fields, so a new option is named without a change here.
 */
export function f16AttnPick(s: F16AttnSpec): string {
  const parts = [`${s.cfg.M}x${s.cfg.N}x${s.cfg.K}`];
  for (const k of Object.keys(s).filter((x) => !PICK_OMITS.has(x)).sort()) {
    const v = (s as unknown as Record<string, unknown>)[k];
    if (v === undefined || v === false) continue;
    if (v === true) parts.push(k);
    else if ((typeof v === 'number' && Number.isInteger(v) && v >= 0) || (typeof v === 'string' && /^[A-Za-z][A-Za-z0-9]{0,15}$/.test(v))) parts.push(`${k}_${v}`);
    else throw new Error(`f16 attention spec field ${k} = ${JSON.stringify(v)} has no pick spelling (a whole number, a word, or true): extend f16AttnPick`);
  }
  return parts.join('.');
}

/** The spec a pick names (f16AttnPick's inverse) at head dim D and this device's subgroup size; null for a name this build cannot build. */
export function f16AttnSpecOfPick(pick: string, D: number, sgSize: number, pass: 'fwd' | 'dq' | 'dkdv' = 'fwd'): F16AttnSpec | null {
  const [head, ...rest] = pick.split('.');
  const m = /^(\d{1,3})x(\d{1,3})x(\d{1,3})$/.exec(head);
  if (!m) return null;
  const { known, required } = pickFields();
  const o: Record<string, unknown> = { cfg: { M: Number(m[1]), N: Number(m[2]), K: Number(m[3]) }, D, sgSize };
  for (const p of rest) {
    const f = /^([A-Za-z][A-Za-z0-9]{0,31})(?:_([A-Za-z0-9]{1,16}))?$/.exec(p);
    if (!f || !known.has(f[1]) || Object.hasOwn(o, f[1])) return null;
    o[f[1]] = f[2] === undefined ? true : /^\d+$/.test(f[2]) ? Number(f[2]) : f[2];
  }
  if (!required.every((k) => Object.hasOwn(o, k))) return null;
  const s = o as unknown as F16AttnSpec;
  const e = pass === 'fwd' ? f16AttnSpecError(s, Infinity, Infinity, false, true) : f16AttnBwdSpecError(pass, s, Infinity, Infinity, false, true);
  return e || f16AttnPick(s) !== pick ? null : s;
}

/** The backward's pick: one spec's when dq and dk/dv share it, else dq's '/' dk/dv's. */
export const f16AttnBwdPick = (s: F16AttnBwdSpecs) => (f16AttnPick(s.dq) === f16AttnPick(s.dkdv) ? f16AttnPick(s.dq) : `${f16AttnPick(s.dq)}/${f16AttnPick(s.dkdv)}`);

/** f16AttnBwdPick's inverse (null: a name this build cannot build). */
export function f16AttnBwdSpecsOfPick(pick: string, D: number, sgSize: number): F16AttnBwdSpecs | null {
  const parts = pick.split('/');
  if (parts.length > 2) return null;
  const dq = f16AttnSpecOfPick(parts[0], D, sgSize, 'dq');
  const dkdv = f16AttnSpecOfPick(parts[parts.length - 1], D, sgSize, 'dkdv');
  return dq && dkdv && !f16AttnBwdPairError({ dq, dkdv }) && f16AttnBwdPick({ dq, dkdv }) === pick ? { dq, dkdv } : null;
}

/** Picks (fwd: spec, bwd: spec pair) that passed their check on a runtime, the emulated twin's apart: only those serve a call. */
const verified = new WeakMap<Runtime, Set<string>>();
export const verifiedKey = (pass: 'fwd' | 'bwd', D: number, sgSize: number, pick: string, emulate?: boolean) => `${emulate ? 'emu ' : ''}${pass} D${D} sg${sgSize} ${pick}`;
/** The verifiedKey of each pick that passed on this runtime (verifyTunedF16Attention checks no pick twice). */
export const verifiedKeys = (rt: Runtime): string[] => [...(verified.get(rt) ?? [])];
/** Remembers a pick that passed its check on this runtime (./checks.ts), so that it may serve a call. */
export function markVerified(rt: Runtime, pass: 'fwd' | 'bwd', D: number, sgSize: number, pick: () => string, emulate?: boolean): void {
  let name: string;
  try {
    name = pick();
  } catch {
    return; // a spec with no pick spelling is never a tuned pick: nothing to remember
  }
  let ok = verified.get(rt);
  if (!ok) verified.set(rt, (ok = new Set()));
  ok.add(verifiedKey(pass, D, sgSize, name, emulate));
}

/** The first tuned pick of this call (store.ts, family 'f16attn') that passed its check on this runtime. */
function tunedAttn<S>(rt: Runtime, pass: 'fwd' | 'bwd', s: Shape, emulate: boolean, parse: (pick: string) => S | null): S | undefined {
  const ok = verified.get(rt);
  for (const pick of tunedPicks(rt.device, 'f16attn', f16AttnTuneKey(pass, s)) ?? []) {
    const spec = parse(pick);
    if (spec && ok?.has(verifiedKey(pass, s.D, subgroupSize(rt), pick, emulate))) return spec;
  }
  return undefined;
}

/**
 * The forward spec a call runs: the pick tuned for its shape on this device once verified on this
 * runtime, else the spec enableF16Attention verified for its head dim (the first passing). The source
 * is noted for the run's tuning status (tune/store.ts, family 'f16attn'; `note` false: the tuner asking,
 * no call made). `emulate`: the twin's checks.
 */
export function f16AttentionSpecFor(rt: Runtime, s: Shape, emulate = false, note = true): F16AttnSpec | undefined {
  const tuned = tunedAttn(rt, 'fwd', s, emulate, (p) => f16AttnSpecOfPick(p, s.D, subgroupSize(rt)));
  const spec = tuned ?? f16AttentionSpec(rt, s.D);
  if (spec && note) noteChoice(rt.device, 'f16attn', f16AttnTuneKey('fwd', s), tuned ? 'tuned' : 'heuristic');
  return spec;
}

/**
 * The backward's specs for a call: its tuned pair once verified on this runtime, else the head dim's first
 * passing pair (f16AttentionSpecFor). `canStore` false (no dS scratch that holds a pair: TP): stored-dS
 * picks are passed over, and a stored-dS first pair gives way to the first verified one that recomputes.
 */
export function f16AttentionBackwardSpecsFor(rt: Runtime, s: Shape, emulate = false, note = true, canStore = true): F16AttnBwdSpecs | undefined {
  const tuned = tunedAttn(rt, 'bwd', s, emulate, (p) => {
    const specs = f16AttnBwdSpecsOfPick(p, s.D, subgroupSize(rt));
    return specs && (canStore || !specs.dq.ds) ? specs : null;
  });
  const first = f16AttentionBackwardSpecs(rt, s.D);
  const specs = tuned ?? (first?.dq.ds && !canStore ? bwdRecompute.get(rt)?.get(s.D) : first);
  if (specs && note) noteChoice(rt.device, 'f16attn', f16AttnTuneKey('bwd', s), tuned ? 'tuned' : 'heuristic');
  return specs;
}
