/**
 * The attention backward's stored-dS path: the dK/dV pass (attention.ts, its DS variant) also writes
 * dS = P∘(dP − Di) of its tiles to a scratch buffer, and dq = scale·dS·K is then a small GEMM per
 * query block (attn_dq_from_ds) instead of a second pass that rebuilds S, P and dP. dS costs about
 * T²/2 floats per head (layout: src/engine/kernels/attention/ds.wgsl); it lives in backward scratch that is dead
 * during the attention backward (the model passes dF1), never in a buffer of its own, and when the
 * batch's dS does not fit there the pairs (b, KV head) go in chunks: dK/dV of a chunk, then its dq.
 * Fewer chunks run faster (bigger grids), so the INT8-dP backward, whose dS already carries INT8
 * error, stores it as bf16: half the bytes, a `base` layer's dS in one chunk (DsFormat).
 * See attention-ds.ref.ts for the maths of the layout and the dq product.
 */
import dsSrc from './ds.wgsl?raw';
import dqDsBody from './dq-ds.wgsl?raw';
import { type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { dsHeadFloats } from './ds.ref';
import { measuredFor } from './tables';
import { unrollLoops, wgslPreamble, wgslSection } from '../wgsl';

export { dsHeadFloats, dqFromDsRef, storedDsRef } from './ds.ref';

/** Which dq pass the backward runs: rebuilt S/P/dP ('recompute') or from the stored dS ('stored'). */
export type DqPath = 'recompute' | 'stored';

/**
 * A tile of attn_dq_from_ds: BQ query rows per workgroup, BK keys per step, each thread RG row groups
 * of 4 queries × CV vec4 columns of dq; threads = (BQ/4/RG)·ceil(ceil(D/4)/CV).
 */
export interface DqDsTile {
  BQ: number; BK: number; RG: number; CV: number;
  /** Fetch the next step's K rows and dS into registers during the FMAs on the current one. */
  prefetch?: true;
  /** The key loop of a step written out (`// unroll`, wgsl.ts) instead of a loop over BK. */
  unroll?: true;
}

/** Tried in order by chooseDqDsTile after the measured one (MEASURED_ATTENTION_TILES' `dqDs`; bench/attn-tune.ts times them all against the recompute path). */
export const DQDS_CANDIDATES: DqDsTile[] = [
  { BQ: 64, BK: 32, RG: 1, CV: 1 }, { BQ: 64, BK: 64, RG: 1, CV: 1 }, { BQ: 64, BK: 32, RG: 2, CV: 1 },
  { BQ: 64, BK: 32, RG: 1, CV: 2 }, { BQ: 64, BK: 64, RG: 2, CV: 1 }, { BQ: 64, BK: 32, RG: 2, CV: 2 },
  { BQ: 64, BK: 64, RG: 2, CV: 2 }, { BQ: 128, BK: 32, RG: 2, CV: 1 }, { BQ: 128, BK: 32, RG: 2, CV: 2 },
  { BQ: 128, BK: 16, RG: 2, CV: 1 }, { BQ: 32, BK: 32, RG: 1, CV: 1 }, { BQ: 32, BK: 64, RG: 1, CV: 1 },
  { BQ: 32, BK: 32, RG: 2, CV: 2 }, { BQ: 16, BK: 32, RG: 1, CV: 1 }, { BQ: 16, BK: 16, RG: 1, CV: 2 },
  { BQ: 16, BK: 16, RG: 1, CV: 4 }, { BQ: 8, BK: 8, RG: 1, CV: 4 },
  // Prefetched and written-out forms of the tiles the H200 ran fastest without them.
  { BQ: 64, BK: 32, RG: 1, CV: 1, prefetch: true }, { BQ: 64, BK: 32, RG: 1, CV: 1, unroll: true },
  { BQ: 64, BK: 32, RG: 1, CV: 1, prefetch: true, unroll: true }, { BQ: 128, BK: 16, RG: 2, CV: 1, prefetch: true },
  { BQ: 128, BK: 16, RG: 2, CV: 1, prefetch: true, unroll: true }, { BQ: 64, BK: 16, RG: 1, CV: 1, prefetch: true },
  { BQ: 64, BK: 16, RG: 1, CV: 1, prefetch: true, unroll: true }, { BQ: 32, BK: 32, RG: 1, CV: 1, prefetch: true },
  { BQ: 128, BK: 32, RG: 2, CV: 1, prefetch: true }, { BQ: 64, BK: 32, RG: 1, CV: 2, prefetch: true, unroll: true },
  { BQ: 64, BK: 32, RG: 2, CV: 1, prefetch: true, unroll: true }, { BQ: 128, BK: 8, RG: 2, CV: 1, prefetch: true },
];

export function dqDsTileName(t: DqDsTile): string {
  return `${t.BQ}x${t.BK}r${t.RG}c${t.CV}${t.prefetch ? 'p' : ''}${t.unroll ? 'u' : ''}`;
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
  const kItems = t.BK * Math.ceil(D / 4);
  const dsItems = t.BQ * (t.BK / 4);
  if (t.prefetch && (kItems > 4 * nt || dsItems > 4 * nt)) return `prefetch holds more than 4 + 4 vec4s per thread`;
  if (nt > lim.maxComputeInvocationsPerWorkgroup || nt > lim.maxComputeWorkgroupSizeX) return `${nt} threads`;
  const bytes = dqDsTileBytes(t, D);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

export function chooseDqDsTile(rt: Runtime, D: number): DqDsTile {
  const named = measuredFor(rt.gpu, (t) => t.dqDs?.[`D${D}`]);
  const measured = DQDS_CANDIDATES.find((c) => dqDsTileName(c) === named);
  if (measured && !dqDsTileProblem(rt, measured, D)) return measured;
  const t = DQDS_CANDIDATES.find((c) => !dqDsTileProblem(rt, c, D));
  if (!t) throw new Error(`attention dq from dS: no tile fits head dim ${D} on this device`);
  return t;
}

/**
 * How the dK/dV pass stores dS: fp32, or bf16 (half the bytes, so twice the pairs per chunk) where
 * dS already carries INT8 error (the INT8-dP backward), whose dq then reads bf16 dS.
 */
export type DsFormat = 'f32' | 'bf16';

/** Bytes of the stored dS of one (b, KV head) pair: its G query heads. */
export function dsPairBytes(T: number, G: number, format: DsFormat = 'f32'): number {
  return G * dsHeadFloats(T) * (format === 'bf16' ? 2 : 4);
}

/** A run of (b, KV head) pairs b·nKV + g whose dS is stored at once. */
export interface DsChunk { pair0: number; pairs: number }

/**
 * The B·nKV pairs in as few chunks as `scratchBytes` allows, of even size (the last may be smaller);
 * [] when not even one pair's dS fits (the backward then recomputes).
 */
export function dsChunks(B: number, nKV: number, G: number, T: number, scratchBytes: number, format: DsFormat = 'f32'): DsChunk[] {
  return pairChunks(B * nKV, Math.floor(scratchBytes / dsPairBytes(T, G, format)));
}

/** `total` pairs in as few chunks of at most `fit` as possible, of even size (the last may be smaller); [] when fit < 1 (dsChunks; the f16 backward's stored dS). */
export function pairChunks(total: number, fit: number): DsChunk[] {
  if (fit < 1 || total === 0) return [];
  const n = Math.ceil(total / Math.ceil(total / fit));
  const out: DsChunk[] = [];
  for (let p0 = 0; p0 < total; p0 += n) out.push({ pair0: p0, pairs: Math.min(n, total - p0) });
  return out;
}

/** The dK/dV kernels' dS writer (binding 9), appended to their shader in the DS variant (bf16: blocked only). */
export function dsWriterSrc(blocked: boolean, format: DsFormat = 'f32'): string {
  if (format === 'bf16' && !blocked) throw new Error('attention dS: only the blocked dK/dV kernels store bf16');
  return `${wgslPreamble(dsSrc)}\n${wgslSection(dsSrc, format === 'bf16' ? 'vec4_bf16' : blocked ? 'vec4' : 'scalar')}`;
}

const unrolled = new Map<string, string>();
function unrolledDqDsSrc(D: number, format: DsFormat, BK: number): string {
  const key = `${D % 4 === 0}:${format}:${BK}`;
  let code = unrolled.get(key);
  if (!code) unrolled.set(key, (code = unrollLoops(dqDsSrc(D, format), { BK })));
  return code;
}

const dqDsSrc = (D: number, format: DsFormat) => `${wgslPreamble(dsSrc)}\n${wgslSection(dsSrc, format === 'bf16' ? 'read_bf16' : 'read_f32')}\n`
  + `${wgslPreamble(dqDsBody)}\n${wgslSection(dqDsBody, D % 4 === 0 ? 'vec4' : 'vec2')}`;

export interface DqFromDsArgs {
  label: string;
  /** The chunk's stored dS (pairs·dsPairBytes(T, G, format) bytes). */
  dS: Binding;
  format: DsFormat;
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
    code: t.unroll ? unrolledDqDsSrc(a.D, a.format, t.BK) : dqDsSrc(a.D, a.format),
    entryPoint: 'attn_dq_from_ds',
    constants: { D: a.D, BQ: t.BQ, BK: t.BK, RG: t.RG, CV: t.CV, NT: dqDsThreads(t, a.D), PREFETCH: t.prefetch ? 1 : 0 },
    bindings: [a.dS, a.k, a.params, a.dq],
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / t.BQ), a.pairs * a.G],
  });
}
