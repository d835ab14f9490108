/**
 * The attention backward's stored-dS path: the dK/dV pass (attention.ts, its DS variant) also writes
 * dS = P∘(dP − Di) of its tiles to a scratch buffer, and dq = scale·dS·K is then a small GEMM per
 * query block (attn_dq_from_ds) instead of a second pass that rebuilds S, P and dP. dS costs about
 * T²/2 floats per head (layout: shaders/attention-ds.wgsl); it lives in backward scratch that is dead
 * during the attention backward (the model passes dF1), never in a buffer of its own, and when the
 * batch's dS does not fit there the pairs (b, KV head) go in chunks: dK/dV of a chunk, then its dq.
 * See attention-ds.ref.ts for the maths of the layout and the dq product.
 */
import dsSrc from '../../../shaders/attention-ds.wgsl?raw';
import dqDsBody from '../../../shaders/attention-dq-ds.wgsl?raw';
import { type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { dsHeadFloats } from './attention-ds.ref';
import { wgslPreamble, wgslSection } from './wgsl';

export { dsHeadFloats, dqFromDsRef, storedDsRef } from './attention-ds.ref';

/** Which dq pass the backward runs: rebuilt S/P/dP ('recompute') or from the stored dS ('stored'). */
export type DqPath = 'recompute' | 'stored';

/**
 * A tile of attn_dq_from_ds: BQ query rows per workgroup, BK keys per step, each thread RG row groups
 * of 4 queries × CV vec4 columns of dq; threads = (BQ/4/RG)·ceil(ceil(D/4)/CV).
 */
export interface DqDsTile { BQ: number; BK: number; RG: number; CV: number }

/** Tried in order by chooseDqDsTile (bench/attn-tune.ts times them all against the recompute path). */
export const DQDS_CANDIDATES: DqDsTile[] = [
  { BQ: 64, BK: 32, RG: 1, CV: 1 }, { BQ: 64, BK: 64, RG: 1, CV: 1 }, { BQ: 64, BK: 32, RG: 2, CV: 1 },
  { BQ: 64, BK: 32, RG: 1, CV: 2 }, { BQ: 64, BK: 64, RG: 2, CV: 1 }, { BQ: 64, BK: 32, RG: 2, CV: 2 },
  { BQ: 64, BK: 64, RG: 2, CV: 2 }, { BQ: 128, BK: 32, RG: 2, CV: 1 }, { BQ: 128, BK: 32, RG: 2, CV: 2 },
  { BQ: 128, BK: 16, RG: 2, CV: 1 }, { BQ: 32, BK: 32, RG: 1, CV: 1 }, { BQ: 32, BK: 64, RG: 1, CV: 1 },
  { BQ: 32, BK: 32, RG: 2, CV: 2 }, { BQ: 16, BK: 32, RG: 1, CV: 1 }, { BQ: 16, BK: 16, RG: 1, CV: 2 },
  { BQ: 16, BK: 16, RG: 1, CV: 4 }, { BQ: 8, BK: 8, RG: 1, CV: 4 },
];

export function dqDsTileName(t: DqDsTile): string {
  return `${t.BQ}x${t.BK}r${t.RG}c${t.CV}`;
}

export function dqDsThreads(t: DqDsTile, D: number): number {
  return Math.floor(t.BQ / 4 / t.RG) * Math.ceil(Math.ceil(D / 4) / t.CV);
}

/** Workgroup storage bytes (mirrors Ks and dsT in attention-dq-ds.wgsl). */
export function dqDsTileBytes(t: DqDsTile, D: number): number {
  return (t.BK * (Math.ceil(D / 4) | 1) + t.BK * ((t.BQ / 4) | 1)) * 16;
}

/** Why attn_dq_from_ds cannot run a tile at head dim D (null when it can). */
export function dqDsTileProblem(rt: Runtime, t: DqDsTile, D: number): string | null {
  if (![1, 2].includes(t.RG)) return `RG ${t.RG} not 1 or 2`;
  if (![1, 2, 4].includes(t.CV)) return `CV ${t.CV} not 1, 2 or 4`;
  if (t.BQ < 4 * t.RG || t.BQ % (4 * t.RG) !== 0) return `BQ ${t.BQ} not a multiple of ${4 * t.RG}`;
  if (t.BK < 4 || t.BK % 4 !== 0) return `BK ${t.BK} not a multiple of 4`;
  if (D % 2 !== 0 || D < 2) return `head dim ${D} not even`;
  const lim = rt.device.limits;
  const nt = dqDsThreads(t, D);
  if (nt > lim.maxComputeInvocationsPerWorkgroup || nt > lim.maxComputeWorkgroupSizeX) return `${nt} threads`;
  const bytes = dqDsTileBytes(t, D);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

export function chooseDqDsTile(rt: Runtime, D: number): DqDsTile {
  const t = DQDS_CANDIDATES.find((c) => !dqDsTileProblem(rt, c, D));
  if (!t) throw new Error(`attention dq from dS: no tile fits head dim ${D} on this device`);
  return t;
}

/** Bytes of the stored dS of one (b, KV head) pair: its G query heads. */
export function dsPairBytes(T: number, G: number): number {
  return G * dsHeadFloats(T) * 4;
}

/** A run of (b, KV head) pairs b·nKV + g whose dS is stored at once. */
export interface DsChunk { pair0: number; pairs: number }

/**
 * The B·nKV pairs in as few chunks as `scratchBytes` allows, of even size (the last may be smaller);
 * [] when not even one pair's dS fits (the backward then recomputes).
 */
export function dsChunks(B: number, nKV: number, G: number, T: number, scratchBytes: number): DsChunk[] {
  const total = B * nKV;
  const fit = Math.floor(scratchBytes / dsPairBytes(T, G));
  if (fit < 1 || total === 0) return [];
  const n = Math.ceil(total / Math.ceil(total / fit));
  const out: DsChunk[] = [];
  for (let p0 = 0; p0 < total; p0 += n) out.push({ pair0: p0, pairs: Math.min(n, total - p0) });
  return out;
}

/** The dK/dV kernels' dS writer (binding 9), appended to their shader in the DS variant. */
export function dsWriterSrc(blocked: boolean): string {
  return `${wgslPreamble(dsSrc)}\n${wgslSection(dsSrc, blocked ? 'vec4' : 'scalar')}`;
}

const dqDsSrc = (D: number) => `${wgslPreamble(dsSrc)}\n${wgslPreamble(dqDsBody)}\n${wgslSection(dqDsBody, D % 4 === 0 ? 'vec4' : 'vec2')}`;

export interface DqFromDsArgs {
  label: string;
  /** The chunk's stored dS (pairs·dsPairBytes(T, G) bytes). */
  dS: Binding;
  k: Binding;
  dq: Binding;
  /** The attention Params uniform of the chunk (pair0 set). */
  params: GPUBuffer;
  T: number; G: number; D: number;
  pairs: number;
  tile: DqDsTile;
}

/** dq (overwritten) of the chunk's query heads from their stored dS. */
export function dqFromDs(rt: Runtime, a: DqFromDsArgs): Dispatch {
  const t = a.tile;
  const problem = dqDsTileProblem(rt, t, a.D);
  if (problem) throw new Error(`${a.label}: attention dq-from-dS tile ${JSON.stringify(t)}: ${problem}`);
  return rt.kernel({
    label: `${a.label}.attnDqDs`,
    code: dqDsSrc(a.D),
    entryPoint: 'attn_dq_from_ds',
    constants: { D: a.D, BQ: t.BQ, BK: t.BK, RG: t.RG, CV: t.CV, NT: dqDsThreads(t, a.D) },
    bindings: [a.dS, a.k, a.params, a.dq],
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / t.BQ), a.pairs * a.G],
  });
}
