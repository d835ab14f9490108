/**
 * fp32 GEMM dispatches:  C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N]   (shaders/matmul.wgsl).
 *   M = rows of C (tokens B·T in the model), N = columns of C, K = reduction length.
 *   op(A) = A stored row-major [M,K], or [K,M] when transA; op(B) = B stored [K,N], or [N,K] when transB.
 * The model's three forms: Y = X·Wᵀ (transB, W is HF [out,in]), dX = dY·W (NN), dW = dYᵀ·X (transA,
 * accumulate for tied embeddings).
 *
 * Variants differ in block tile (BM×BN×BK), micro tile (TM×TN), whether the next k-tile is staged
 * in registers across the FMAs (prefetch) and the launch order (swizzle); all are the same WGSL with
 * different `override` constants, so one correctness suite covers them all. Transposes and
 * accumulate are overrides too (folded at pipeline creation); vec4 vs scalar global access and
 * the bounds-check-free path for shapes the tile divides (FULL_TILES) are chosen per call from the
 * shape (see shaders/matmul-io.wgsl).
 *
 * Split-K: a choice named `<variant>_sk<S>` cuts K into S slices run side by side (grid z) into a
 * caller-provided workspace of S·M·N floats, then sums them in order (shaders/matmul-splitk.wgsl):
 * what the dW GEMMs need, whose M×N (e.g. 384×384) gives a handful of tiles while K = B·T is huge.
 * Split choices need two dispatches, so only matmulSteps() / buildMatmul() with a workspace use them.
 */
import matmulSrc from '../../../shaders/matmul.wgsl?raw';
import ioSrc from '../../../shaders/matmul-io.wgsl?raw';
import splitKSrc from '../../../shaders/matmul-splitk.wgsl?raw';
import streamKFixupSrc from '../../../shaders/matmul-streamk.wgsl?raw';
import { adapterMatches } from '../gpu/device';
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { Uniforms } from '../gpu/runtime';
import { timeDispatches } from '../gpu/timer';
import { asSlice, bindingBytes, grid2d, vec4Aligned } from './launch';
import { MEASURED_TABLES } from './matmul-tables';
import { unrollLoops, wgslIf, wgslSection } from './wgsl';

export interface MatmulVariant {
  name: string;
  BM: number;
  BN: number;
  BK: number;
  TM: 4 | 8;
  TN: 4 | 8 | 16;
  /**
   * true: the next k-tile is loaded into registers before the FMAs on the current one and stored
   * after them (latency hidden inside the workgroup). false: loaded and stored before the FMAs
   * (fewer live registers, so more resident workgroups hide it instead).
   */
  prefetch: boolean;
  /** Tile rows per launch group for L2 reuse (0: row-major launch order). */
  swizzle: number;
  /**
   * matmul.wgsl's LEAN text (`_ia`): with whole tiles, each global load's index is set up once and
   * advanced by a constant per k tile. Fewer instructions, but the NVIDIA driver schedules it
   * differently: faster on some shapes, slower on others, so tuning picks (docs/benchmarks.md, session 11).
   */
  lean: boolean;
  /** Relative per-thread throughput for the heuristic (128×128×8 with 8×8 micro tiles = 1). */
  eff: number;
}

/** BMxBNkBK_TMxTN, then _np (no prefetch), _swG (swizzle G) and _ia (lean) when they differ from the default. */
export function variantName(v: Omit<MatmulVariant, 'name' | 'eff'>): string {
  return `${v.BM}x${v.BN}k${v.BK}_${v.TM}x${v.TN}${v.prefetch ? '' : '_np'}${v.swizzle > 1 ? `_sw${v.swizzle}` : ''}${v.lean ? '_ia' : ''}`;
}

function tile(BM: number, BN: number, BK: number, TM: 4 | 8, TN: 4 | 8 | 16, eff: number,
  o: { prefetch?: boolean; swizzle?: number; lean?: boolean } = {}): MatmulVariant {
  const v = { BM, BN, BK, TM, TN, prefetch: o.prefetch ?? true, swizzle: o.swizzle ?? 0, lean: o.lean ?? false };
  return { name: variantName(v), ...v, eff };
}

/**
 * Largest first: the heuristic breaks ties towards the earlier entry. The efficiencies are the
 * heuristic's prior (from H200 runs where measured; bench/gemm-tune.ts measures all of them);
 * on a known GPU the autotuner's or a saved table's picks override it. Variants with 512 threads
 * or more than 32 KiB of workgroup memory only run where the limits allow (not on SwiftShader).
 */
export const MATMUL_VARIANTS: readonly MatmulVariant[] = [
  tile(256, 128, 8, 8, 8, 0.97),
  tile(128, 256, 8, 8, 8, 0.96),
  tile(256, 128, 8, 8, 8, 0.96, { prefetch: false }),
  tile(256, 128, 8, 8, 8, 0.96, { swizzle: 8 }),
  tile(128, 128, 8, 8, 8, 1.0),
  tile(128, 128, 8, 8, 8, 0.99, { swizzle: 8 }),
  tile(128, 128, 8, 8, 8, 0.98, { prefetch: false }),
  tile(128, 128, 16, 8, 8, 0.95),
  tile(128, 128, 16, 8, 8, 0.94, { prefetch: false }),
  tile(128, 128, 8, 4, 8, 0.7),
  // 128 threads of 8×16 (cuBLAS's SIMT layout); priors below the 8×8 tiles until measured.
  tile(256, 128, 8, 8, 16, 0.9),
  tile(128, 256, 8, 8, 16, 0.9),
  tile(128, 128, 16, 8, 16, 0.9),
  tile(128, 128, 8, 8, 16, 0.9),
  tile(128, 128, 8, 8, 16, 0.9, { swizzle: 8 }),
  tile(128, 128, 8, 8, 16, 0.89, { prefetch: false }),
  tile(128, 64, 16, 8, 8, 0.88),
  tile(64, 128, 16, 8, 8, 0.88),
  tile(64, 64, 16, 8, 8, 0.8),
  tile(128, 32, 16, 8, 4, 0.72),
  tile(64, 64, 16, 4, 4, 0.5),
  tile(32, 32, 16, 4, 4, 0.45),
  // The LEAN text of the tiles the H200 tables pick (priors just below their twins': measured per shape).
  tile(128, 128, 8, 8, 16, 0.895, { lean: true }),
  tile(128, 256, 8, 8, 16, 0.895, { lean: true }),
  tile(128, 128, 8, 8, 8, 0.995, { lean: true }),
  tile(256, 128, 8, 8, 8, 0.965, { lean: true }),
  tile(64, 64, 16, 8, 8, 0.795, { lean: true }),
];

export interface MatmulShape {
  M: number;
  N: number;
  K: number;
  transA?: boolean;
  transB?: boolean;
}

export interface MatmulArgs extends MatmulShape {
  label: string;
  a: Binding;
  b: Binding;
  c: Binding;
  alpha?: number;
  accumulate?: boolean;
  /**
   * Force a choice by name (a variant, or `<variant>_sk<S>` for split-K); default: the autotuned
   * pick for this shape, else the heuristic.
   */
  variant?: string;
  /**
   * Split-K partials (S·M·N floats; a different buffer from c). Without it, or when it is too
   * small for a choice, the GEMM runs in one pass.
   */
  workspace?: Binding;
  /**
   * Default true: transposes, accumulate and BK are compile-time constants. false: read from the
   * uniform block, so one pipeline per (variant, vec4 flags) serves every combination (tests).
   */
  specialize?: boolean;
}

type LimitsLike = Pick<GPUSupportedLimits,
  'maxComputeWorkgroupStorageSize' | 'maxComputeInvocationsPerWorkgroup' | 'maxComputeWorkgroupSizeX'>;

export function variantThreads(v: MatmulVariant): number {
  return (v.BM / v.TM) * (v.BN / v.TN);
}

/** Two k-major tiles, rows padded by 4 floats, double buffered. */
export function variantSharedBytes(v: MatmulVariant): number {
  return 2 * v.BK * (v.BM + 4 + v.BN + 4) * 4;
}

/**
 * What matmul.wgsl assumes of a tile shape: vec4 micro-tile groups, and tile loads that fit the
 * shader's four vec4 staging registers per operand (direct layout: ≤ 4 vec4 per thread;
 * transposed layout: ≤ one 4×4 block per thread).
 */
export function variantIsWellFormed(v: MatmulVariant): boolean {
  const t = variantThreads(v);
  return v.BM % v.TM === 0 && v.BN % v.TN === 0 && v.BK % 4 === 0 &&
    v.BM * v.BK <= 16 * t && v.BN * v.BK <= 16 * t && Number.isInteger(v.swizzle) && v.swizzle >= 0;
}

export function variantFits(v: MatmulVariant, limits: LimitsLike): boolean {
  const t = variantThreads(v);
  return variantIsWellFormed(v) && variantSharedBytes(v) <= limits.maxComputeWorkgroupStorageSize &&
    t <= limits.maxComputeInvocationsPerWorkgroup && t <= limits.maxComputeWorkgroupSizeX;
}

export function availableVariants(limits: LimitsLike): MatmulVariant[] {
  return MATMUL_VARIANTS.filter((v) => variantFits(v, limits));
}

export function getVariant(name: string): MatmulVariant {
  const v = MATMUL_VARIANTS.find((x) => x.name === name);
  if (!v) throw new Error(`matmul: unknown variant '${name}' (have ${MATMUL_VARIANTS.map((x) => x.name).join(', ')})`);
  return v;
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

function tryParseChoice(name: string): MatmulChoice | undefined {
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
 * as ceil(T / W) waves of whole tiles, the last one part empty and as long as a full one (an H200
 * holds 264 of the 128×128 8×16 workgroups: 4096³'s 1024 tiles are 3.88 waves, and 3968, 4096 and
 * 4224 rows all take 3.02 ms). Here the whole waves' `dpTiles` tiles run one workgroup each as
 * usual, and the last `skTiles` = T mod W tiles are laid end to end as skTiles · ipt k tiles
 * (ipt = ceil(K / BK) per tile) and cut into `workgroups` (≤ W) near-equal ranges, each shorter
 * than a tile, so the last wave is as long as its share of the work. A range that is a whole tile
 * stores it; a part of a tile goes to a workspace slot (each range has two: its first part and its
 * second, each run by a workgroup of its own: `parts`), and a second pass (shaders/matmul-streamk.wgsl) sums each shared tile's parts in k
 * order into C. When T is a multiple of W nothing is shared (skTiles 0, the plain GEMM).
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
  const P = opts.parallelThreads ?? 65536;
  let best = '';
  let bestCost = Infinity;
  for (const v of availableVariants(limits)) {
    const threads = variantThreads(v);
    const tiles = Math.ceil(shape.M / v.BM) * Math.ceil(shape.N / v.BN);
    for (const S of [1, ...splitCandidates(shape, v, opts.workspaceBytes ?? 0, P)]) {
      const { kChunk, parts } = splitPlan(shape.K, v.BK, S);
      const waves = Math.ceil((tiles * parts) / Math.max(1, Math.floor(P / threads)));
      const reduce = parts > 1 ? 0.001 * (parts + 1) * shape.M * shape.N + 900 : 0;
      const cost = (waves * v.BM * v.BN * Math.min(kChunk, Math.max(shape.K, v.BK))) / threads / v.eff + reduce;
      if (cost < bestCost * (1 - 1e-9)) {
        bestCost = cost;
        best = choiceName(v.name, parts);
      }
    }
  }
  if (!best) throw new Error('matmul: no variant fits this device\'s limits');
  return best;
}

// ---- shader assembly -------------------------------------------------------------------------

const section = (name: string) => wgslSection(ioSrc, name);

const codeCache = new Map<string, string>();

// The dynamic pipeline's stop at the uniform BK; dead in specialized pipelines, and a `break`
// cannot be written out.
const K_GUARD = '      if (!SPECIALIZE && k >= P.bk) { break; }\n';

/**
 * matmul.wgsl with its k loop (marked `// unroll`) written out as `bk` blocks, each `let k = <j>u;`
 * and the loop's body: for specialized pipelines, whose BK is a constant. The NVIDIA Vulkan driver
 * does not unroll the loop itself (see the shader).
 */
export function unrollKSteps(src: string, bk: number): string {
  if (!src.includes(K_GUARD)) throw new Error('matmul.wgsl: the k loop\'s dynamic stop was not found');
  return unrollLoops(src.replace(K_GUARD, ''), { BK: bk });
}

const H_LINE = '    let h = t % 2u;                        // buffer of tile t; tile t + 1 goes to 1 - h\n';

/**
 * matmul.wgsl with the next tile's buffer, `1u - h` in the shader, written `hn = (t + 1u) % 2u`:
 * for the specialized pipelines of TN 16 tiles that do not accumulate. The two are equal; the
 * NVIDIA Vulkan driver makes different code of them. On an H200 the 8×16 tiles run 1-23 % faster
 * this way (4096³ 45.5 vs 45.0 TFLOP/s, 16384x384x384 NN 36.8 vs 29.8), but accumulating ones up
 * to 25 % slower (the base step's k.dx 3.04 vs 3.81 ms) and the 8-wide tiles up to 5x slower
 * (128x128k8_8x8 at 4096³: 7.6-24.6 vs 36.1); the same form written as a branch on TN in the shader
 * gains nothing (docs/benchmarks.md, session 7), hence a text edit for the one case.
 */
export function nextBufferByModulo(src: string): string {
  const uses = src.split('1u - h').length - 1;
  if (!src.includes(H_LINE) || uses !== 6) throw new Error(`matmul.wgsl: the tile loop's buffer index is not the expected one (${uses} uses of 1u - h)`);
  return src.replace(H_LINE, `${H_LINE}    let hn = (t + 1u) % 2u;\n`).replaceAll('(1u - h)', 'hn').replaceAll('1u - h', 'hn');
}

const MAIN_HEAD = '        @builtin(num_workgroups) nwg: vec3<u32>) {\n';

/** main()'s body: what follows its header up to its closing brace (main is the last function). */
function mainBody(src: string): { head: string; body: string } {
  const at = src.indexOf(MAIN_HEAD);
  const end = src.trimEnd();
  if (at < 0 || src.split(MAIN_HEAD).length !== 2 || !end.endsWith('\n}')) throw new Error('matmul.wgsl: main() is not the expected text');
  return { head: src.slice(0, at + MAIN_HEAD.length), body: end.slice(at + MAIN_HEAD.length, -1) };
}

/**
 * A stream-K GEMM's WGSL: the STREAM_K text's declarations, and a main() that is the plain GEMM's,
 * unchanged for the workgroups of the whole waves (tile (wid.y, wid.x) as always: the first
 * dpTiles tiles in row order), with the STREAM_K main() body as a branch before it for the
 * workgroups after them, one part each. Forms measured slower on an H200 (docs/benchmarks.md,
 * session 10): every workgroup through the stream-K text (the whole waves' tiles 3-6 % slower:
 * 4096³ 38.1-42.9 vs 45.5 TFLOP/s), and a workgroup running both parts of its range (the end of one
 * tile, the start of the next) one after the other (44.9). This form, on the plain text: 45.1 at
 * 4096³ (the plain GEMM 45.5: the last wave's idle share, 12 % of a wave there, is less than the
 * parts' stores and the summing pass cost), 46.1 vs 45.9 at 8192³, 43.5 vs 42.9 (split-K) at
 * 8192x768x2560 NN. On the LEAN text (`_ia`, session 11) its parts run as fast as whole tiles:
 * 4096³ 46.6 vs 45.9 one pass, 8192³ 48.1 vs 46.3 (gemm_tune, s11g), the H200 table's pick for both.
 */
export function streamKMain(skText: string, plainText: string): string {
  const sk = mainBody(skText);
  const plain = mainBody(plainText);
  const branch = sk.body.replace(/\bstoreRow\(/g, 'storeRowSK(').replace(/^(.)/gm, '  $1');
  return `${sk.head}  if (wid.y * nwg.x + wid.x >= SP.dpTiles) {  // a stream-K workgroup\n${branch}    return;\n  }\n${plain.body}}\n`;
}

/**
 * The WGSL for one choice of vec4/scalar access per operand (A, B, C); `unrollBK` > 0 writes the
 * k loop out for a specialized pipeline of that BK, `tn16` (specialized TN 16 tiles that do not
 * accumulate) writes the next tile's buffer index as nextBufferByModulo does, `streamK` keeps the
 * shader's `// #if STREAM_K` blocks and `lean` its `// #if LEAN` ones (for the other choices the
 * text stays as it was measured).
 */
export function matmulCode(vecA: boolean, vecB: boolean, vecC: boolean, unrollBK = 0, tn16 = false, streamK = false, lean = false): string {
  const key = `${+vecA}${+vecB}${+vecC}:${unrollBK}:${+tn16}:${+streamK}:${+lean}`;
  let code = codeCache.get(key);
  if (!code) {
    const text = (sk: boolean) => {
      const src = wgslIf(matmulSrc, { STREAM_K: sk, LEAN: lean });
      const body = tn16 ? nextBufferByModulo(src) : src;
      return unrollBK > 0 ? unrollKSteps(body, unrollBK) : body;
    };
    code = [
      section(vecA ? 'a_vec4' : 'a_scalar'),
      section(vecB ? 'b_vec4' : 'b_scalar'),
      section(vecC ? 'c_vec4' : 'c_scalar'),
      streamK ? streamKMain(text(true), text(false)) : text(false),
    ].join('\n');
    codeCache.set(key, code);
  }
  return code;
}

/** vec4 global access needs the contiguous (column) dimension of the stored matrix % 4 == 0. */
export function vectorFlags(s: MatmulShape): { vecA: boolean; vecB: boolean; vecC: boolean } {
  return {
    vecA: (s.transA ? s.M : s.K) % 4 === 0,
    vecB: (s.transB ? s.K : s.N) % 4 === 0,
    vecC: s.N % 4 === 0,
  };
}

// ---- autotune cache --------------------------------------------------------------------------

const tuned = new WeakMap<GPUDevice, Map<string, string>>();

export function shapeKey(s: MatmulShape): string {
  return `${s.M}x${s.N}x${s.K}${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'}`;
}

/** The choice autotuneMatmul (or a loaded table) picked for this shape on this device, if any. */
export function tunedVariant(rt: Runtime, s: MatmulShape): string | undefined {
  return tuned.get(rt.device)?.get(shapeKey(s));
}

export function setTunedVariant(rt: Runtime, s: MatmulShape, name: string): void {
  setTunedKey(rt, shapeKey(s), name);
}

function setTunedKey(rt: Runtime, key: string, name: string): void {
  parseChoice(name);
  let m = tuned.get(rt.device);
  if (!m) tuned.set(rt.device, (m = new Map()));
  m.set(key, name);
}

/** The picks so far as plain JSON (shapeKey → choice), to save next to a run's config. */
export function tunedTable(rt: Runtime): Record<string, string> {
  return Object.fromEntries(tuned.get(rt.device) ?? []);
}

/**
 * The pick of a measured table (matmul-tables.ts) for this device's adapter, if one matches: its
 * best, else the fastest of its ranked choices that `fits` (the workspace the call has).
 */
export function measuredVariant(rt: Runtime, s: MatmulShape, fits: (choice: string) => boolean = () => true): string | undefined {
  const key = shapeKey(s);
  for (const t of MEASURED_TABLES) {
    if (!adapterMatches(rt.gpu, t.match)) continue;
    const name = [t.table[key], ...(t.ranked?.[key] ?? [])].find((c) => c !== undefined && fits(c));
    if (name !== undefined) return name;
  }
  return undefined;
}

/** Restores saved picks; names that parse and fit this device's limits only (a table from another GPU). */
export function loadTunedTable(rt: Runtime, table: Record<string, string>): void {
  for (const [key, name] of Object.entries(table)) {
    const c = tryParseChoice(name);
    if (c && variantFits(c.variant, rt.device.limits)) setTunedKey(rt, key, name);
  }
}

// ---- dispatch building -----------------------------------------------------------------------

function checkArgs(args: MatmulArgs): void {
  const { label, M, N, K } = args;
  for (const [n, v] of [['M', M], ['N', N], ['K', K]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${label}: ${n} must be an integer ≥ 1, got ${v}`);
  }
  for (const [n, b, elems] of [['a', args.a, M * K], ['b', args.b, K * N], ['c', args.c, M * N]] as const) {
    const have = bindingBytes(b);
    if (have < elems * 4) throw new Error(`${label}: binding ${n} has ${have} bytes, needs ${elems * 4}`);
  }
  if (args.workspace) {
    const ws = asSlice(args.workspace).buffer;
    for (const [n, b] of [['a', args.a], ['b', args.b], ['c', args.c]] as const) {
      // WebGPU forbids one buffer as read-only and writable storage in the same dispatch.
      if (asSlice(b).buffer === ws) throw new Error(`${label}: the split-K workspace must be a different buffer from ${n}`);
    }
  }
}

/**
 * The choice for a call: forced (args.variant), else the pick tuned on this device, else a measured
 * table's for this GPU model (the fastest measured choice whose workspace the call has), else the
 * heuristic. A split choice needs the workspace: forced without
 * enough of it is an error; a tuned or measured one is passed over for the next source (a table
 * tuned with a workspace, used without one).
 */
function pickChoice(rt: Runtime, args: MatmulShape & { label: string; variant?: string }, wsBytes: number): MatmulChoice {
  const fits = (name: string) => matmulWorkspaceBytes(args, name) <= wsBytes;
  if (args.variant !== undefined) {
    const c = parseChoice(args.variant);
    if (!fits(args.variant)) {
      throw new Error(`${args.label}: ${args.variant} needs a workspace of ${matmulWorkspaceBytes(args, args.variant)} bytes, have ${wsBytes}`);
    }
    return c;
  }
  const usable = (name: string) => {
    const c = tryParseChoice(name);
    return c !== undefined && fits(name) && variantFits(c.variant, rt.device.limits);
  };
  // A stale table entry (a variant since renamed) or one over this device's limits is passed over.
  for (const t of [tunedVariant(rt, args), measuredVariant(rt, args, usable)]) {
    if (t !== undefined && usable(t)) return parseChoice(t);
  }
  return parseChoice(chooseMatmulVariant(args, rt.device.limits, { workspaceBytes: wsBytes }));
}

/**
 * The choice a call of this shape runs with `workspaceBytes` of split-K workspace (0: what a plain
 * matmul() runs): tuned on this device, else the measured table's, else the heuristic's.
 */
export function matmulChoice(rt: Runtime, s: MatmulShape, workspaceBytes = 0): string {
  return pickChoice(rt, { label: 'matmulChoice', ...s }, workspaceBytes).name;
}

export interface BuiltMatmul {
  /** The GEMM, then for split-K the reduction of its partials: run them in this order. */
  dispatches: Dispatch[];
  /** The per-call uniform blocks and tables (free them with rt.mem.free when the dispatches are dropped). */
  uniforms: GPUBuffer[];
  /** The choice used (`<variant>`, `<variant>_sk<S>` or `<variant>_st<W>`). */
  variant: string;
  /** Whether the shape let the bounds-check-free path run (FULL_TILES). */
  fullTiles: boolean;
}

/** matmulSteps() plus the uniform buffers it allocated (benchmarks and the autotuner free them). */
export function buildMatmul(rt: Runtime, args: MatmulArgs): BuiltMatmul {
  checkArgs(args);
  const { M, N, K } = args;
  const choice = pickChoice(rt, args, args.workspace ? bindingBytes(args.workspace) : 0);
  const v = choice.variant;
  if (!variantFits(v, rt.device.limits)) throw new Error(`${args.label}: variant ${v.name} exceeds this device's limits`);
  if (choice.streamK > 0) {
    const plan = streamKPlan(args, v, choice.streamK);
    // Without shared tiles every tile is one workgroup's, as in the plain GEMM: that runs.
    if (plan.workspaceFloats > 0) return buildStreamK(rt, args, choice, plan);
  }
  const { kChunk, parts } = splitPlan(K, v.BK, choice.splitK);
  const accumulate = args.accumulate ?? false;
  const alpha = args.alpha ?? 1;
  const name = choiceName(v.name, parts);
  // Split-K partials are raw sums; the reduction applies alpha and accumulate.
  const { gemm, uniform, fullTiles } = gemmDispatch(rt, args, v, {
    name, out: parts > 1 ? args.workspace as Binding : args.c, kChunk, accumulate: parts > 1 ? false : accumulate, alpha: parts > 1 ? 1 : alpha,
    workgroups: [Math.ceil(N / v.BN), Math.ceil(M / v.BM), parts],
  });
  if (parts === 1) return { dispatches: [gemm], uniforms: [uniform], variant: name, fullTiles };
  const ru = rt.uniform(`${args.label}.splitk`, new Uniforms().u32(M * N).u32(parts).f32(alpha).u32(accumulate ? 1 : 0));
  const reduce = rt.kernel({
    label: `${args.label}[matmul split-K reduce ${parts}]`,
    code: splitKSrc,
    entryPoint: 'main',
    bindings: [args.workspace as Binding, args.c, ru],
    workgroups: grid2d(rt, Math.ceil((M * N) / 256)),
  });
  return { dispatches: [gemm, reduce], uniforms: [uniform, ru], variant: name, fullTiles };
}

/**
 * The GEMM dispatch of a choice (buildMatmul checked the arguments): C, split-K's partials (grid z =
 * slices) or, with `streamK`, the stream-K GEMM (its extra bindings and grid).
 */
function gemmDispatch(rt: Runtime, args: MatmulArgs, v: MatmulVariant, o: {
  name: string; out: Binding; kChunk: number; accumulate: boolean; alpha: number; workgroups: [number, number, number];
  streamK?: Binding[];
}): { gemm: Dispatch; uniform: GPUBuffer; fullTiles: boolean } {
  const { M, N, K, transA = false, transB = false } = args;
  // vec4 bindings also need 16-byte offsets (the convention is 256; checked, not assumed).
  const vf = vectorFlags(args);
  const [vecA, vecB, vecC] = [vf.vecA && vec4Aligned(args.a), vf.vecB && vec4Aligned(args.b), vf.vecC && vec4Aligned(o.out)];
  const fullTiles = vecA && vecB && vecC && M % v.BM === 0 && N % v.BN === 0 && K % v.BK === 0;
  const specialize = args.specialize ?? true;
  const flags = (transA ? 1 : 0) | (transB ? 2 : 0) | (o.accumulate ? 4 : 0);
  const uniform = rt.uniform(args.label, new Uniforms().u32(M).u32(N).u32(K).f32(o.alpha).u32(flags).u32(v.BK).u32(o.kChunk).u32(0));
  // A dynamic pipeline must not differ by the flags, or it would not be shared.
  const f: Record<string, number> = specialize ? { TRANS_A: +transA, TRANS_B: +transB, ACCUM: +o.accumulate } : {};
  const gemm = rt.kernel({
    label: `${args.label}[matmul ${o.name}${transA ? ' tA' : ''}${transB ? ' tB' : ''}]`,
    code: matmulCode(vecA, vecB, vecC, specialize ? v.BK : 0, specialize && v.TN === 16 && !o.accumulate, o.streamK !== undefined, v.lean),
    entryPoint: 'main',
    constants: {
      ...f, SPECIALIZE: +specialize, FULL_TILES: +fullTiles, PREFETCH: +v.prefetch, SWIZZLE: o.streamK ? 0 : v.swizzle,
      BM: v.BM, BN: v.BN, BK: v.BK, TM: v.TM, TN: v.TN,
    },
    bindings: [args.a, args.b, o.out, uniform, ...(o.streamK ?? [])],
    workgroups: o.workgroups,
  });
  return { gemm, uniform, fullTiles };
}

/** The two dispatches of a stream-K choice whose plan shares tiles (buildMatmul checked the arguments). */
function buildStreamK(rt: Runtime, args: MatmulArgs, choice: MatmulChoice, plan: StreamKPlan): BuiltMatmul {
  const { M, N, K } = args;
  const v = choice.variant;
  const ws = args.workspace as Binding;
  // The plain GEMM's grid of tiles, cut after the whole waves, then rows enough for the stream-K workgroups.
  const nParts = plan.parts.length / 4;
  const rows = Math.ceil((plan.dpTiles + nParts) / plan.tilesX);
  if (rows > rt.device.limits.maxComputeWorkgroupsPerDimension) {
    throw new Error(`${args.label}: ${choice.name} needs ${rows} rows of workgroups, the device allows ${rt.device.limits.maxComputeWorkgroupsPerDimension}`);
  }
  const accumulate = args.accumulate ?? false;
  const alpha = args.alpha ?? 1;
  const su = rt.uniform(`${args.label}.streamk`, new Uniforms().u32(plan.tilesX).u32(plan.dpTiles).u32(nParts).u32(0));
  const table = rt.upload('workspace', `${args.label}.streamk.parts`, plan.parts);
  // Whole tiles go to C with alpha and accumulate; the parts' raw sums get them in the summing pass.
  const { gemm, uniform, fullTiles } = gemmDispatch(rt, args, v, {
    name: choice.name, out: args.c, kChunk: K, accumulate, alpha, workgroups: [plan.tilesX, rows, 1], streamK: [su, ws, table],
  });
  const fu = rt.uniform(`${args.label}.streamk.fixup`, new Uniforms().u32(M).u32(N).u32(plan.tilesX).u32(plan.dpTiles).u32(plan.ipt)
    .u32(plan.skQ).u32(plan.skR).u32(accumulate ? 1 : 0).f32(alpha).u32(v.BM).u32(v.BN).u32(0));
  const fixup = rt.kernel({
    label: `${args.label}[matmul stream-K fixup ${plan.skTiles} tiles]`,
    code: streamKFixupSrc,
    entryPoint: 'main',
    bindings: [ws, args.c, fu],
    workgroups: [Math.ceil((v.BM * v.BN) / 1024), plan.skTiles, 1],
  });
  return { dispatches: [gemm, fixup], uniforms: [uniform, su, table, fu], variant: choice.name, fullTiles };
}

/**
 * C (+)= alpha·op(A)·op(B) as one or two dispatches (two for split-K, which needs `workspace`),
 * built once and re-run with rt.run.
 */
export function matmulSteps(rt: Runtime, args: MatmulArgs): Dispatch[] {
  return buildMatmul(rt, args).dispatches;
}

/** C (+)= alpha·op(A)·op(B) as one Dispatch (never split-K), built once and re-run with rt.run. */
export function matmul(rt: Runtime, args: Omit<MatmulArgs, 'workspace'>): Dispatch {
  const d = buildMatmul(rt, { ...args, workspace: undefined }).dispatches;
  return d[0];
}

export function matmulFlops(s: MatmulShape): number {
  return 2 * s.M * s.N * s.K;
}

// ---- autotuning ------------------------------------------------------------------------------

export interface AutotuneOptions {
  /** Candidate choices (default: every variant that fits the device, plus its split-K choices). */
  variants?: string[];
  /** Split-K workspace the tuned calls will have (default 0: one-pass choices only). */
  workspaceBytes?: number;
  warmup?: number;
  reps?: number;
  /** Dispatches per timed pass (default: enough for ~1 GFLOP, at most 20). */
  inner?: number;
  /**
   * Run each candidate until its time per run is steady, at least this many ms, before timing it
   * (default 0): the GPU idles while a candidate's pipeline compiles, and a short GEMM timed right
   * after runs at the idle clock (an H200: 5x slow at 0.06 ms).
   */
  warmupMs?: number;
}

export interface AutotuneResult {
  shape: MatmulShape;
  variant: string;
  /** Median ms of one GEMM, per candidate. */
  timesMs: Record<string, number>;
  method: 'timestamp' | 'wallclock';
}

/** Deterministic non-zero operand data (zeros can run faster than real data on some GPUs). */
export function fillPattern(n: number, seed: number): Float32Array {
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = (s >>> 8) / 16777216 - 0.5;
  }
  return x;
}

export interface GemmOperands {
  a: GPUBuffer;
  b: GPUBuffer;
  c: GPUBuffer;
  /** Split-K partials, when asked for. */
  workspace?: GPUBuffer;
  free(): void;
}

/** Workspace buffers for timing one shape (filled with a fixed pattern). */
export function gemmOperands(rt: Runtime, s: MatmulShape, label = 'gemm', workspaceBytes = 0): GemmOperands {
  const a = rt.upload('workspace', `${label}.a`, fillPattern(s.M * s.K, 1));
  const b = rt.upload('workspace', `${label}.b`, fillPattern(s.K * s.N, 2));
  const c = rt.createBuffer('workspace', `${label}.c`, s.M * s.N * 4);
  const workspace = workspaceBytes > 0 ? rt.createBuffer('workspace', `${label}.splitk`, workspaceBytes) : undefined;
  const all = [a, b, c, ...(workspace ? [workspace] : [])];
  return { a, b, c, workspace, free: () => all.forEach((x) => rt.mem.free(x)) };
}

/** Times one built GEMM (its one or two dispatches): median ms per GEMM, repeated `inner` times per pass. */
export async function timeMatmul(
  rt: Runtime, dispatches: Dispatch[], s: MatmulShape, opts: { warmup?: number; reps?: number; inner?: number; warmupMs?: number } = {},
): Promise<{ ms: number; method: 'timestamp' | 'wallclock' }> {
  const inner = opts.inner ?? Math.min(20, Math.max(1, Math.round(1e9 / matmulFlops(s))));
  const pass = Array.from({ length: inner }, () => dispatches).flat();
  const r = await timeDispatches(rt, pass, { warmup: opts.warmup, reps: opts.reps ?? 5, warmupMs: opts.warmupMs });
  return { ms: r.medianMs / inner, method: r.method };
}

/**
 * Every choice worth timing on a shape: the variants that fit, plus their split-K choices within
 * the workspace, plus stream-K over each of `streamK` workgroup counts (how many workgroups the GPU
 * holds at once is not something WebGPU reports: the caller names the counts to try) where the
 * plan shares tiles and its workspace fits.
 */
export function autotuneCandidates(rt: Runtime, s: MatmulShape, workspaceBytes = 0, streamK: readonly number[] = []): string[] {
  return availableVariants(rt.device.limits).flatMap((v) => [
    v.name,
    ...splitCandidates(s, v, workspaceBytes).map((S) => choiceName(v.name, S)),
    ...(v.swizzle > 1 ? [] : streamK.map((W) => choiceName(v.name, 1, W)).filter((c) => {
      const bytes = matmulWorkspaceBytes(s, c);
      return bytes > 0 && bytes <= workspaceBytes;
    })),
  ]);
}

/**
 * Times every candidate choice on each shape on this GPU and caches the fastest, so later
 * matmul()/matmulSteps() calls for the same (M,N,K,transA,transB) use it. Call before building the model.
 */
export async function autotuneMatmul(rt: Runtime, shapes: MatmulShape[], opts: AutotuneOptions = {}): Promise<AutotuneResult[]> {
  const wsBytes = opts.workspaceBytes ?? 0;
  const results: AutotuneResult[] = [];
  for (const shape of shapes) {
    const candidates = (opts.variants ?? autotuneCandidates(rt, shape, wsBytes))
      .filter((n) => variantFits(parseChoice(n).variant, rt.device.limits) && matmulWorkspaceBytes(shape, n) <= wsBytes);
    if (candidates.length === 0) throw new Error('autotuneMatmul: no candidate variant fits this device');
    const need = Math.max(0, ...candidates.map((n) => matmulWorkspaceBytes(shape, n)));
    const ops = gemmOperands(rt, shape, 'autotune', need);
    const timesMs: Record<string, number> = {};
    let method: AutotuneResult['method'] = 'wallclock';
    try {
      for (const name of candidates) {
        const built = buildMatmul(rt, { label: 'autotune', ...shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: name });
        try {
          const t = await timeMatmul(rt, built.dispatches, shape, opts);
          timesMs[name] = t.ms;
          method = t.method;
        } finally {
          built.uniforms.forEach((u) => rt.mem.free(u));
        }
      }
    } finally {
      ops.free();
    }
    // Ties (and NaN) go to the earlier, larger-tile candidate.
    const best = candidates.reduce((x, y) => (timesMs[y] < timesMs[x] ? y : x));
    setTunedVariant(rt, shape, best);
    results.push({ shape: { ...shape }, variant: best, timesMs, method });
  }
  return results;
}
