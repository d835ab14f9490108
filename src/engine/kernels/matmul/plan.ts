/**
 * How a GEMM choice runs a shape: the choice names (`<variant>`, `<variant>_sk<S>` split-K,
 * `<variant>_st<W>` stream-K), how split-K cuts K and how stream-K shares out the last wave, the
 * workspace each needs, and which operands allow vec4 access.
 *   M = rows of C, N = columns of C, K = reduction length; op(A) is [M,K] stored, or [K,M] when
 *   transA; op(B) is [K,N], or [N,K] when transB.
 */
import { getVariant, type MatmulVariant, variantThreads } from './variants';

export interface MatmulShape {
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
}

// ---- split-K ---------------------------------------------------------------------------------

/** Most K slices a split-K choice may ask for. */
export const MAX_SPLIT_K = 32;

/** Most workgroups a stream-K choice may name. */
export const MAX_STREAM_K = 4096;

/**
 * A GEMM choice: a variant, run in `splitK` K slices (1 = one pass), or with its last wave shared
 * out over `streamK` workgroups (0 = not stream-K; see streamKPlan).
 */
export interface MatmulChoice {
  name: string;
  variant: MatmulVariant;
  splitK: number;
  streamK: number;
}

export function choiceName(variant: string, splitK: number, streamK = 0): string {
  if (streamK > 0) return `${variant}_st${streamK}`;
  return splitK > 1 ? `${variant}_sk${splitK}` : variant;
}

/**
 * Parses `<variant>`, `<variant>_sk<S>` (2 ≤ S ≤ MAX_SPLIT_K) or `<variant>_st<W>` (1 ≤ W ≤
 * MAX_STREAM_K, a variant without swizzle); throws on anything else.
 */
export function parseChoice(name: string): MatmulChoice {
  const m = /^(.*)_(sk|st)(\d+)$/.exec(name);
  const variant = getVariant(m ? m[1] : name);
  if (m?.[2] === 'st') {
    const W = Number(m[3]);
    if (!(W >= 1 && W <= MAX_STREAM_K)) throw new Error(`matmul: stream-K of '${name}' must name 1..${MAX_STREAM_K} workgroups`);
    if (variant.swizzle > 1) throw new Error(`matmul: stream-K of '${name}': a swizzled variant's tile order is not the one stream-K counts in`);
    return { name, variant, splitK: 1, streamK: W };
  }
  const splitK = m ? Number(m[3]) : 1;
  if (m && !(splitK >= 2 && splitK <= MAX_SPLIT_K)) throw new Error(`matmul: split-K of '${name}' must be 2..${MAX_SPLIT_K}`);
  return { name, variant, splitK, streamK: 0 };
}

export function tryParseChoice(name: string): MatmulChoice | undefined {
  try {
    return parseChoice(name);
  } catch {
    return undefined;
  }
}

/**
 * How a choice cuts K: kChunk (a multiple of BK) per slice and the slice count actually used
 * (fewer than asked when K has fewer BK tiles; every slice gets at least one).
 */
export function splitPlan(K: number, BK: number, splitK: number): { kChunk: number; parts: number } {
  const kTiles = Math.max(1, Math.ceil(K / BK));
  const perSlice = Math.ceil(kTiles / Math.max(1, splitK));
  return { kChunk: perSlice * BK, parts: Math.ceil(kTiles / perSlice) };
}

/** Workspace bytes a choice needs for this shape (0 when it runs in one pass). */
export function matmulWorkspaceBytes(s: MatmulShape, choice: string): number {
  const c = parseChoice(choice);
  if (c.streamK > 0) return streamKPlan(s, c.variant, c.streamK).workspaceFloats * 4;
  const { parts } = splitPlan(s.K, c.variant.BK, c.splitK);
  return parts > 1 ? parts * s.M * s.N * 4 : 0;
}

// ---- stream-K --------------------------------------------------------------------------------

/**
 * How a stream-K choice runs a shape. The GPU holds about W workgroups at once, so C's T tiles run
 * as ceil(T / W) waves of whole tiles, the last one part empty and as long as a full one (W = 264
 * workgroups of 128×128: 4096³'s 1024 tiles are 3.88 waves, which take as long as 4). Here the
 * whole waves' `dpTiles` tiles run one workgroup each as usual, and the last `skTiles` = T mod W
 * tiles are laid end to end as skTiles · ipt k tiles (ipt = ceil(K / BK) per tile) and cut into
 * `workgroups` (≤ W) near-equal ranges, each shorter than a tile, so the last wave is as long as
 * its share of the work. A range that is a whole tile stores it; a part of a tile goes to a
 * workspace slot (each range has two: its first part and its second, each run by a workgroup of
 * its own: `parts`), and a second pass (src/engine/kernels/matmul/streamk.wgsl) sums each shared tile's parts
 * in k order into C. When T is a multiple of W nothing is shared (skTiles 0, the plain GEMM).
 */
export interface StreamKPlan {
  tilesX: number;
  tiles: number;
  ipt: number;
  dpTiles: number;
  skTiles: number;
  /** Workgroups sharing the stream-K region (≤ W, never more than its k tiles). */
  workgroups: number;
  /** k tiles per region workgroup: skQ, one more for the first skR. */
  skQ: number;
  skR: number;
  workspaceFloats: number;
  /**
   * The stream-K workgroups, in launch order: (tile, first k tile, k tiles, slot) each, slot
   * 0xffffffff for a whole tile (to C). Workgroup w's range is its first part (slot 2w) and, if it
   * reaches into the next tile, a second (2w + 1) run by another workgroup: first all first parts,
   * then the second parts longest first. The GPU starts each on the slot that frees up next, and
   * the slots free up shortest first part first, so every slot runs about one range's k tiles.
   */
  parts: Uint32Array;
}

const NO_SLOT = 0xffffffff;

export function streamKPlan(s: MatmulShape, v: MatmulVariant, W: number): StreamKPlan {
  const tilesX = Math.ceil(s.N / v.BN);
  const tiles = tilesX * Math.ceil(s.M / v.BM);
  const ipt = Math.max(1, Math.ceil(s.K / v.BK));
  if (tiles * ipt >= 2 ** 32) throw new Error(`matmul: stream-K of ${s.M}x${s.N}x${s.K}: ${tiles} tiles × ${ipt} k tiles overflow u32`);
  const skTiles = tiles % W;
  const dpTiles = tiles - skTiles;
  const iters = skTiles * ipt;
  // skTiles < W, so every range is at most one tile long: the end of one tile and the start of the next.
  const workgroups = Math.min(W, iters);
  const skQ = workgroups > 0 ? Math.floor(iters / workgroups) : 0;
  const skR = workgroups > 0 ? iters - skQ * workgroups : 0;
  // Tiles are shared unless every range is a whole tile (skQ = ipt: as many workgroups as tiles).
  const shared = skTiles > 0 && !(skR === 0 && skQ === ipt);
  const workspaceFloats = shared ? 2 * workgroups * v.BM * v.BN : 0;
  const first: number[][] = [];
  const second: number[][] = [];
  for (let w = 0; w < workgroups; w++) {
    const b = dpTiles * ipt + w * skQ + Math.min(w, skR);
    const e = b + skQ + (w < skR ? 1 : 0);
    const t = Math.floor(b / ipt);
    const kt = b - t * ipt;
    const n1 = Math.min(e - b, ipt - kt);
    first.push([t, kt, n1, n1 === ipt ? NO_SLOT : 2 * w]);
    if (e - b > n1) second.push([t + 1, 0, e - b - n1, 2 * w + 1]);
  }
  second.sort((x, y) => y[2] - x[2] || x[0] - y[0]);
  const parts = Uint32Array.from([...first, ...second].flat());
  return { tilesX, tiles, ipt, dpTiles, skTiles, workgroups, skQ, skR, workspaceFloats, parts };
}

/**
 * Slice counts split-K may try: every count up to 8, then sparser. Not only powers of two: what fills
 * a GPU is tiles × S ≈ a whole number of waves of resident workgroups, and the waves are not powers
 * of two (an H200 holds 264 workgroups of a 128×128 8×16 tile: 768×768's 36 tiles fill one wave
 * with 7 slices, not 8, which needs two).
 */
export const SPLIT_COUNTS: readonly number[] = [2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32];

/**
 * Split-K counts worth trying for a variant on a shape: only while the tiles alone leave the GPU
 * under-filled, and no further than about two waves of workgroups.
 */
export function splitCandidates(s: MatmulShape, v: MatmulVariant, workspaceBytes: number, parallelThreads = 65536): number[] {
  const tiles = Math.ceil(s.M / v.BM) * Math.ceil(s.N / v.BN);
  const resident = Math.max(1, Math.floor(parallelThreads / variantThreads(v)));
  const out: number[] = [];
  for (const S of SPLIT_COUNTS) {
    if (tiles * S / 2 >= 2 * resident) break;
    const { parts } = splitPlan(s.K, v.BK, S);
    if (parts < 2 || out.includes(parts)) continue;
    if (parts * s.M * s.N * 4 <= workspaceBytes) out.push(parts);
  }
  return out;
}

/** vec4 global access needs the contiguous (column) dimension of the stored matrix % 4 == 0. */
export function vectorFlags(s: MatmulShape): { vecA: boolean; vecB: boolean; vecC: boolean } {
  return {
    vecA: (s.transA ? s.M : s.K) % 4 === 0,
    vecB: (s.transB ? s.K : s.N) % 4 === 0,
    vecC: s.N % 4 === 0,
  };
}

export function shapeKey(s: MatmulShape): string {
  return `${s.M}x${s.N}x${s.K}${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'}`;
}
