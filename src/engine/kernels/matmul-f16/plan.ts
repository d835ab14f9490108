/**
 * The f16 GEMM's choices, kept free of GPU calls so CI can test them: which path a device gets
 * (tensor cores, SIMT, or none: the caller keeps fp32), the operand layouts of the model's three
 * GEMM forms, which operands can be read as vec4<f16>, the tensor-core block layouts to try, and
 * split-K for thin grids.
 *
 *   C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N], A and B f16 in storage, C f32, f32 accumulation.
 *   op(A) = A stored [M,K], or [K,M] when transA; op(B) = B stored [K,N], or [N,K] when transB.
 * The model's forms (kernels/matmul/matmul.ts): forward Y = X·Wᵀ (NT), dX = dY·W (NN),
 * dW = dYᵀ·X (TN).
 */
import { chooseI8SplitK } from '../qgemm/splitk';
import { splitPlan } from '../matmul/plan';

export type GemmForm = 'NT' | 'NN' | 'TN';
export const GEMM_FORMS: GemmForm[] = ['NT', 'NN', 'TN'];

export const FORM_TRANS: Record<GemmForm, { transA: boolean; transB: boolean }> = {
  NT: { transA: false, transB: true },
  NN: { transA: false, transB: false },
  TN: { transA: true, transB: false },
};

/** The form of a transposition pair; TT is not one the model runs. */
export function formOf(transA: boolean, transB: boolean): GemmForm | null {
  if (transA && transB) return null;
  return transA ? 'TN' : transB ? 'NT' : 'NN';
}

export interface GemmShape {
  M: number;
  N: number;
  K: number;
}

/** Row lengths (the contiguous dimension) of A and B as stored. */
export function contiguousDims(form: GemmForm, s: GemmShape): { a: number; b: number } {
  const { transA, transB } = FORM_TRANS[form];
  return { a: transA ? s.M : s.K, b: transB ? s.K : s.N };
}

/** Which operands can be read four f16 at a time: their rows are whole vec4s (and start 8-byte aligned). */
export function vec4Operands(form: GemmForm, s: GemmShape): { a: boolean; b: boolean } {
  const d = contiguousDims(form, s);
  return { a: d.a % 4 === 0, b: d.b % 4 === 0 };
}

/** The f16 GEMM a device can run: 'fp32' means none (no shader-f16): the caller keeps the fp32 GEMM. */
export type F16Path = 'f16-tensor-core' | 'f16-simt' | 'fp32';

export interface F16Capabilities {
  shaderF16: boolean;
  subgroupMatrix: boolean;
  subgroupMatrixConfigs: { componentType: string; resultComponentType: string; M: number; N: number; K: number }[];
}

/** f16 → f32 subgroup-matrix configurations, largest tile first (the ones the tensor-core kernel uses). */
export function f16ConfigsOf<C extends F16Capabilities['subgroupMatrixConfigs'][number]>(configs: C[]): C[] {
  return configs
    .filter((c) => c.componentType === 'f16' && c.resultComponentType === 'f32')
    .sort((a, b) => b.M * b.N * b.K - a.M * a.N * a.K);
}

/**
 * The path a device offers before anything is checked: tensor cores need shader-f16, subgroup
 * matrices and an f16 → f32 configuration; SIMT needs shader-f16; else fp32. enableF16TensorCores
 * still verifies each layout on the device before the tensor-core path is used.
 */
export function offeredF16Path(c: F16Capabilities): F16Path {
  if (!c.shaderF16) return 'fp32';
  if (c.subgroupMatrix && f16ConfigsOf(c.subgroupMatrixConfigs).length > 0) return 'f16-tensor-core';
  return 'f16-simt';
}

/**
 * The kernel one GEMM runs: the tensor-core spec verified for its form when its operands' rows are
 * whole vec4s (the tensor-core kernel stages vec4s only), else SIMT (vec4 or scalar loads per
 * operand), or fp32 without shader-f16.
 */
export function f16KernelFor(o: { shaderF16: boolean; tensorCoreForm: boolean; form: GemmForm; shape: GemmShape }): F16Path {
  if (!o.shaderF16) return 'fp32';
  const v = vec4Operands(o.form, o.shape);
  return o.tensorCoreForm && v.a && v.b ? 'f16-tensor-core' : 'f16-simt';
}

// ---- tensor-core layouts -------------------------------------------------------------------------

/** How a workgroup of the f16 tensor-core GEMM covers its block (as I8TcLayout, in f16 elements). */
export interface F16TcLayout {
  tilesM: number;
  tilesN: number;
  sgM: number;
  sgN: number;
  /** f16 elements of K staged per step: a multiple of the config's K and of 4. */
  BK: number;
  /** Padding elements per staged row (a multiple of 4): spreads the 16 rows a tile load reads over banks. */
  PAD: number;
  /** Whole blocks store their result tiles straight to C (subgroupMatrixStore); partial ones go through workgroup memory. */
  direct: boolean;
  /**
   * Workgroup staging buffers (default 1). 2: K step k+1 is staged into the other buffer while step k
   * is multiplied, so one barrier per K step instead of two (twice the staging memory).
   */
  stages?: 1 | 2;
  /**
   * Inner loop (default 'tiles': every A and B tile of a k slice loaded, then all multiplies).
   * 'streamB': the A tiles, then each B tile loaded and multiplied into its column of accumulators:
   * tilesM + 1 operand matrices live instead of tilesM + tilesN (fewer registers).
   */
  loop?: 'tiles' | 'streamB';
  /** f16 elements each staging copy moves per thread (default 4: one vec4). 8: two adjacent vec4s to a 16-byte-aligned index. */
  copy?: 4 | 8;
  /** Workgroup grid walked in strips of this many block rows along M, down M first (L2 reuse of B's columns); 0 or 1: row by row. */
  swizzle?: number;
  /**
   * 2 (two stages only): the K loop unrolled twice, one body per buffer, so every staging and
   * matrix-load offset is a per-subgroup base plus a literal (no loop-carried buffer index).
   */
  unroll?: 1 | 2;
  /**
   * false (one stage only): each K step's tiles are fetched right before they are staged, not into
   * registers during the previous step's multiplies: no prefetch registers live across the multiplies
   * (fewer registers a thread, so more workgroups an SM hide the fetch instead). Default true.
   */
  prefetch?: boolean;
}

/**
 * Block shapes enableF16TensorCores tries, first valid and correct first (bench/f16-device.ts
 * times each; the fastest should go first). 128×128 blocks of 4×4 tiles on 2×2 subgroups, as the
 * INT8 kernel's best; one subgroup per workgroup last (no uniformity diagnostic needed).
 */
export const F16_TC_LAYOUTS: F16TcLayout[] = [
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: false },
  { tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 32, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 32, PAD: 8, direct: true },
  { tilesM: 2, tilesN: 2, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 2, sgM: 1, sgN: 1, BK: 32, PAD: 8, direct: false },
  // F16-SPEED-PLAN G3-G5: two stages unrolled (literal offsets); BK 16 (fewer prefetch registers); 8 subgroups of
  // 4x2 tiles. H100 4096³ NT (s27c1): unroll2 98-101 TFLOP/s (plain 2-stage 28.5), BK16 139, 8sg streamB 89-110,
  // all below the first row's 175; kept for the tuner on other GPUs.
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2, swizzle: 8, unroll: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2, unroll: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 16, PAD: 8, direct: true, swizzle: 8 },
  { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 16, PAD: 8, direct: true, loop: 'streamB', swizzle: 8 },
  { tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 32, PAD: 8, direct: true, loop: 'streamB', swizzle: 8 },
  // Aimed at the H100's limits of the first (173 TFLOP/s at 4096³, cuBLAS 707): the second barrier per
  // K step, register pressure, staging copies, L2 reuse, and 8 subgroups a workgroup.
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, loop: 'streamB' },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2, loop: 'streamB' },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2, copy: 8 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, swizzle: 8 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, stages: 2, loop: 'streamB', copy: 8, swizzle: 8 },
  { tilesM: 4, tilesN: 4, sgM: 4, sgN: 2, BK: 32, PAD: 8, direct: true },
  { tilesM: 4, tilesN: 4, sgM: 4, sgN: 2, BK: 32, PAD: 8, direct: true, loop: 'streamB', swizzle: 8 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 16, PAD: 8, direct: true, stages: 2 },
  { tilesM: 4, tilesN: 4, sgM: 4, sgN: 2, BK: 16, PAD: 8, direct: true, stages: 2 },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 16, PAD: 8, direct: true, stages: 2, loop: 'streamB', copy: 8, swizzle: 8 },
  { tilesM: 4, tilesN: 4, sgM: 4, sgN: 2, BK: 16, PAD: 8, direct: true, stages: 2, loop: 'streamB', swizzle: 8 },
  // The first row issues the INT8 template's MMAs per K step (0.5 matrix loads an MMA, 2 barriers, 16 KiB staged) and runs
  // at its rate (175 TFLOP/s f16 = 350 TOP/s i8: an i8 16x16x32 MMA is one f16 16x16x16's tensor-core work); so these try
  // what the template cannot: no prefetch registers (the BK64 row ran 98.7, likely out of registers), the structure of
  // NVIDIA's vk_cooperative_matrix_perf shmem shader (8 subgroups, BK16, B streamed, 16-byte copies: bench/vkperf-build.sh
  // times it without WGSL), and 128x128 blocks of 16x8x16 tiles (4x8 a subgroup; with 16x16x16 a 128x256 block of 32 result
  // tiles a subgroup, which likely spills).
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, swizzle: 8, prefetch: false },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 8, direct: true, swizzle: 8, prefetch: false },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 32, PAD: 8, direct: true, swizzle: 8, prefetch: false },
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 16, PAD: 8, direct: true, loop: 'streamB', copy: 8 },
  { tilesM: 8, tilesN: 2, sgM: 2, sgN: 4, BK: 16, PAD: 8, direct: true, loop: 'streamB' }, // copy 8 leaves 16x8 tiles' B half a copy a thread
  { tilesM: 4, tilesN: 4, sgM: 2, sgN: 4, BK: 32, PAD: 8, direct: true, loop: 'streamB', copy: 8, swizzle: 8 },
  { tilesM: 4, tilesN: 8, sgM: 2, sgN: 2, BK: 32, PAD: 8, direct: true, swizzle: 8 },
];

/** The layout fields of a spec (what MEASURED_F16TC_LAYOUTS and the tuner's picks store), the defaults left out. */
export function f16TcLayoutOf(s: F16TcLayout): F16TcLayout {
  const l: F16TcLayout = { tilesM: s.tilesM, tilesN: s.tilesN, sgM: s.sgM, sgN: s.sgN, BK: s.BK, PAD: s.PAD, direct: s.direct };
  if ((s.stages ?? 1) !== 1) l.stages = s.stages;
  if ((s.loop ?? 'tiles') !== 'tiles') l.loop = s.loop;
  if ((s.copy ?? 4) !== 4) l.copy = s.copy;
  if ((s.swizzle ?? 0) > 1) l.swizzle = s.swizzle;
  if ((s.unroll ?? 1) !== 1) l.unroll = s.unroll;
  if (s.prefetch === false) l.prefetch = false;
  return l;
}

/**
 * Layouts per GEMM (`MxNxK` + form, e.g. '8192x768x768NT') measured faster than the form's chosen
 * one on a GPU model, with their configuration (M×N×K of the tile); each is checked on the device
 * by enableF16TensorCores before a GEMM uses it. Empty until bench/f16-device.ts --tune-model has
 * run on the GPU: its `tune` rows give the fastest passing layout per shape.
 */
export const MEASURED_F16TC_LAYOUTS: {
  match: { vendor?: string; architecture?: string; device?: string; description?: string };
  source: string;
  table: Record<string, { cfg: [number, number, number]; layout: F16TcLayout }>;
}[] = [];

/** The key of a GEMM in MEASURED_F16TC_LAYOUTS. */
export const f16ShapeKey = (form: GemmForm, s: GemmShape) => `${s.M}x${s.N}x${s.K}${form}`;

export interface F16TcSpec extends F16TcLayout {
  cfg: { M: number; N: number; K: number };
  transA: boolean;
  transB: boolean;
  /** Invocations per subgroup (the adapter's subgroupMaxSize). */
  sgSize: number;
}

export const f16TcBlockM = (s: Pick<F16TcSpec, 'cfg' | 'tilesM' | 'sgM'>) => s.cfg.M * s.tilesM * s.sgM;
export const f16TcBlockN = (s: Pick<F16TcSpec, 'cfg' | 'tilesN' | 'sgN'>) => s.cfg.N * s.tilesN * s.sgN;
export const f16TcThreads = (s: Pick<F16TcSpec, 'sgSize' | 'sgM' | 'sgN'>) => s.sgSize * s.sgM * s.sgN;

/** Elements of each staged operand tile: A's [BM][BK+PAD] (or [BK][BM+PAD] when transA), B's likewise. */
export function f16TcStaging(s: F16TcSpec): { strideA: number; strideB: number; elemsA: number; elemsB: number } {
  const BM = f16TcBlockM(s);
  const BN = f16TcBlockN(s);
  const strideA = s.transA ? BM + s.PAD : s.BK + s.PAD;
  const strideB = s.transB ? s.BK + s.PAD : BN + s.PAD;
  return { strideA, strideB, elemsA: (s.transA ? s.BK : BM) * strideA, elemsB: (s.transB ? BN : s.BK) * strideB };
}

/**
 * Where LoRA's low-rank term s·Uᵀ·op(V) runs on the tensor cores (tc.ts): after the K loop a workgroup
 * stages U's rows and s·V's columns of its block, cfg.K ranks at a time, as f16 in the staging buffer
 * (U [K][BM + PAD], then V [K][BN + PAD]) and multiplies them into its accumulators, which then take
 * the direct store. Whether that fits the spec's staging buffer, and the layout within it.
 */
export function f16TcLowRankStaging(s: F16TcSpec): { fits: boolean; strideU: number; strideV: number; offV: number } {
  const st = f16TcStaging(s);
  const strideU = f16TcBlockM(s) + s.PAD;
  const strideV = f16TcBlockN(s) + s.PAD;
  const offV = s.cfg.K * strideU;
  return { fits: offV + s.cfg.K * strideV <= (st.elemsA + st.elemsB) * (s.stages ?? 1), strideU, strideV, offV };
}

/** Bytes of workgroup memory a spec uses: the f16 staging, then the f32 epilogue scratch (one tile per subgroup). */
export function f16TcWorkgroupBytes(s: F16TcSpec): number {
  const st = f16TcStaging(s);
  const staging = Math.ceil(((st.elemsA + st.elemsB) * 2 * (s.stages ?? 1)) / 4) * 4;
  return staging + s.sgM * s.sgN * s.cfg.M * s.cfg.N * 4;
}

/** Why a spec cannot be built (null when it can). */
export function f16TcSpecError(s: F16TcSpec, maxWorkgroupBytes = 49152, maxThreads = 1024): string | null {
  if (s.transA && s.transB) return 'TT is not a form the model runs';
  if (s.BK % 4 || s.BK % s.cfg.K) return `BK=${s.BK} must be a multiple of 4 and of K=${s.cfg.K}`;
  if (s.PAD % 4) return `PAD=${s.PAD} must be a multiple of 4`;
  const stages = s.stages ?? 1;
  if (stages !== 1 && stages !== 2) return `stages=${stages} must be 1 or 2`;
  const loop = s.loop ?? 'tiles';
  if (loop !== 'tiles' && loop !== 'streamB') return `loop '${loop}' must be 'tiles' or 'streamB'`;
  const copy = s.copy ?? 4;
  if (copy !== 4 && copy !== 8) return `copy=${copy} must be 4 or 8`;
  if (copy === 8 && (s.PAD % 8 || s.BK % 8)) return `copy=8 needs BK and PAD multiples of 8 (16-byte-aligned staged rows), got BK=${s.BK} PAD=${s.PAD}`;
  if (s.swizzle !== undefined && (!Number.isInteger(s.swizzle) || s.swizzle < 0)) return `swizzle=${s.swizzle} must be a whole number ≥ 0`;
  const unroll = s.unroll ?? 1;
  if (unroll !== 1 && unroll !== 2) return `unroll=${unroll} must be 1 or 2`;
  if (unroll === 2 && stages !== 2) return `unroll=2 unrolls the two-stage loop (one body per buffer): it needs stages=2, got stages=${stages}`;
  if (s.prefetch !== undefined && typeof s.prefetch !== 'boolean') return `prefetch=${String(s.prefetch)} must be true or false`;
  if (s.prefetch === false && stages !== 1) return `prefetch=false fetches each step right before staging it: it needs stages=1, got stages=${stages} (two stages stage the prefetched step)`;
  const T = f16TcThreads(s);
  if (T > maxThreads) return `${T} threads per workgroup`;
  const BM = f16TcBlockM(s);
  const BN = f16TcBlockN(s);
  if (((BM * s.BK) / copy) % T || ((BN * s.BK) / copy) % T) return `the ${BM}x${s.BK} and ${BN}x${s.BK} tiles do not split into whole ${copy === 4 ? 'vec4s' : 'pairs of vec4s (copy=8)'} per thread`;
  const bytes = f16TcWorkgroupBytes(s);
  if (bytes > maxWorkgroupBytes) return `${bytes} bytes of workgroup memory`;
  return null;
}

export function f16TcLabel(s: F16TcSpec): string {
  const form = formOf(s.transA, s.transB) ?? 'TT';
  const extra = [(s.stages ?? 1) > 1 ? ` ${s.stages}stage` : '', s.loop === 'streamB' ? ' streamB' : '', (s.copy ?? 4) !== 4 ? ` copy${s.copy}` : '',
    (s.swizzle ?? 0) > 1 ? ` swz${s.swizzle}` : '', (s.unroll ?? 1) > 1 ? ` unroll${s.unroll}` : '', s.prefetch === false ? ' nopf' : ''].join('');
  return `f16 ${form} ${s.cfg.M}x${s.cfg.N}x${s.cfg.K} ${f16TcBlockM(s)}x${f16TcBlockN(s)} (${s.sgM}x${s.sgN} sg of ${s.tilesM}x${s.tilesN}) BK${s.BK} pad${s.PAD}${s.direct ? ' direct' : ''}${extra}`;
}

/**
 * A spec's name as a tuned pick (the tuning cache's picks are short names of [A-Za-z0-9_/.]):
 * form, configuration, tiles, subgroups, BK, PAD, then the options set, e.g.
 * 'NT.16x16x16.4x4.2x2.bk32.p8.d.s2.sb.c8.z8' (then .u2 for unroll 2, .np for no prefetch). The subgroup size is the device's at use.
 */
export function f16TcPick(s: F16TcSpec): string {
  const form = formOf(s.transA, s.transB) ?? 'TT';
  const opts = [s.direct ? 'd' : '', (s.stages ?? 1) > 1 ? `s${s.stages}` : '', s.loop === 'streamB' ? 'sb' : '', (s.copy ?? 4) !== 4 ? `c${s.copy}` : '',
    (s.swizzle ?? 0) > 1 ? `z${s.swizzle}` : '', (s.unroll ?? 1) > 1 ? `u${s.unroll}` : '', s.prefetch === false ? 'np' : ''].filter(Boolean);
  return [form, `${s.cfg.M}x${s.cfg.N}x${s.cfg.K}`, `${s.tilesM}x${s.tilesN}`, `${s.sgM}x${s.sgN}`, `bk${s.BK}`, `p${s.PAD}`, ...opts].join('.');
}

const PICK_RE = /^(NT|NN|TN)\.(\d{1,3})x(\d{1,3})x(\d{1,3})\.(\d{1,2})x(\d{1,2})\.(\d{1,2})x(\d{1,2})\.bk(\d{1,3})\.p(\d{1,3})(\.d)?(\.s2)?(\.sb)?(\.c8)?(?:\.z(\d{1,3}))?(\.u2)?(\.np)?$/;

/** The spec a pick names (f16TcPick's inverse) with this device's subgroup size; null for a name this build cannot run. */
export function f16TcSpecOfPick(pick: string, sgSize: number): F16TcSpec | null {
  const m = PICK_RE.exec(pick);
  if (!m) return null;
  const n = (i: number) => Number(m[i]);
  const s: F16TcSpec = {
    cfg: { M: n(2), N: n(3), K: n(4) }, ...FORM_TRANS[m[1] as GemmForm], sgSize, tilesM: n(5), tilesN: n(6), sgM: n(7), sgN: n(8), BK: n(9), PAD: n(10), direct: !!m[11],
  };
  if (m[12]) s.stages = 2;
  if (m[13]) s.loop = 'streamB';
  if (m[14]) s.copy = 8;
  if (m[15]) s.swizzle = n(15);
  if (m[16]) s.unroll = 2;
  if (m[17]) s.prefetch = false;
  if (f16TcSpecError(s, Infinity, Infinity) || f16TcPick(s) !== pick) return null;
  return s;
}

/** Candidates for one form: every configuration with each valid layout, the configurations' first layouts first. */
export function f16TcCandidates(form: GemmForm, cfgs: F16TcSpec['cfg'][], layouts: F16TcLayout[], sgSize: number, valid: (s: F16TcSpec) => boolean): F16TcSpec[] {
  const per = cfgs.map((cfg) => layouts.map((l): F16TcSpec => ({ cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, ...FORM_TRANS[form], sgSize, ...l })).filter(valid));
  return [...per.map((l) => l[0]).filter(Boolean), ...per.flatMap((l) => l.slice(1))];
}

// ---- SIMT ----------------------------------------------------------------------------------------

/** The SIMT kernel's block: 64×64 outputs, 16×16 threads of 4×4, K steps of 16. */
export const SIMT_F16 = { BM: 64, BN: 64, BK: 16, threads: 256 } as const;

// ---- split-K -------------------------------------------------------------------------------------

/**
 * Slices of K for a GEMM whose output blocks leave the GPU idle (the dW GEMMs: M×N a few hundred
 * square, K the step's tokens): the INT8 GEMM's cost model (qgemm/splitk.ts chooseI8SplitK) in
 * f16 elements, at most what the workspace holds (S·M·N f32 partials).
 */
export function chooseF16SplitK(s: GemmShape & { BM: number; BN: number; BK: number; threads: number }, workspaceBytes: number, maxSplit = Infinity): number {
  return chooseI8SplitK({ M: s.M, N: s.N, BM: s.BM, BN: s.BN, threads: s.threads, kUnits: s.K, step: s.BK }, workspaceBytes, maxSplit);
}

/** K elements per slice (a whole number of K steps) and the slices actually run for S requested. */
export function f16SplitPlan(s: GemmShape, BK: number, S: number): { kChunk: number; parts: number } {
  if (!Number.isInteger(S) || S < 1) throw new Error(`f16 split-K: slice count ${S} must be a positive integer`);
  const p = splitPlan(s.K, BK, S);
  if (p.parts * s.M * s.N >= 2 ** 32) throw new Error(`f16 split-K: ${p.parts} slices of ${s.M}x${s.N} overflow u32 indices`);
  return p;
}

export const f16SplitWorkspaceBytes = (s: GemmShape, parts: number) => (parts > 1 ? parts * s.M * s.N * 4 : 0);
