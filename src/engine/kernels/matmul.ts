/**
 * fp32 GEMM dispatches:  C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N]   (shaders/matmul.wgsl).
 *   M = rows of C (tokens B·T in the model), N = columns of C, K = reduction length.
 *   op(A) = A stored row-major [M,K], or [K,M] when transA; op(B) = B stored [K,N], or [N,K] when transB.
 * The model's three forms: Y = X·Wᵀ (transB, W is HF [out,in]), dX = dY·W (NN), dW = dYᵀ·X (transA,
 * accumulate for tied embeddings).
 *
 * Variants differ in block tile (BM×BN×BK) and micro tile (TM×TN); all are the same WGSL with
 * different `override` constants, so one correctness suite covers them all. Transposes and
 * accumulate are overrides too (folded at pipeline creation); vec4 vs scalar global access is
 * chosen per operand from the shape (see shaders/matmul_io.wgsl).
 */
import matmulSrc from '../../../shaders/matmul.wgsl?raw';
import ioSrc from '../../../shaders/matmul_io.wgsl?raw';
import type { Binding, BufSlice, Dispatch, Runtime } from '../gpu/runtime';
import { Uniforms } from '../gpu/runtime';
import { timeDispatches } from '../gpu/timer';

export interface MatmulVariant {
  name: string;
  BM: number;
  BN: number;
  BK: number;
  TM: 4 | 8;
  TN: 4 | 8;
  /** Relative per-thread throughput for the heuristic (8×8 micro tile, BK 16 = 1). */
  eff: number;
}

/** Largest first: the heuristic breaks ties towards the earlier entry. Names: BMxBNkBK_TMxTN. */
export const MATMUL_VARIANTS: readonly MatmulVariant[] = [
  { name: '128x128k16_8x8', BM: 128, BN: 128, BK: 16, TM: 8, TN: 8, eff: 1.0 },
  { name: '128x128k8_8x8', BM: 128, BN: 128, BK: 8, TM: 8, TN: 8, eff: 0.95 },
  { name: '128x64k16_8x8', BM: 128, BN: 64, BK: 16, TM: 8, TN: 8, eff: 0.92 },
  { name: '64x128k16_8x8', BM: 64, BN: 128, BK: 16, TM: 8, TN: 8, eff: 0.92 },
  { name: '64x64k16_8x8', BM: 64, BN: 64, BK: 16, TM: 8, TN: 8, eff: 0.8 },
  { name: '128x32k16_8x4', BM: 128, BN: 32, BK: 16, TM: 8, TN: 4, eff: 0.72 },
  { name: '64x64k16_4x4', BM: 64, BN: 64, BK: 16, TM: 4, TN: 4, eff: 0.5 },
  { name: '32x32k16_4x4', BM: 32, BN: 32, BK: 16, TM: 4, TN: 4, eff: 0.45 },
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
  /** Force a variant by name; default: the autotuned pick for this shape, else the heuristic. */
  variant?: string;
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
    v.BM * v.BK <= 16 * t && v.BN * v.BK <= 16 * t;
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

/** WebGPU's guaranteed minimum limits: the heuristic's default when no device is at hand. */
const DEFAULT_LIMITS: LimitsLike = {
  maxComputeWorkgroupStorageSize: 16384,
  maxComputeInvocationsPerWorkgroup: 256,
  maxComputeWorkgroupSizeX: 256,
};

/**
 * Cost model: a GPU holding `parallelThreads` resident threads (65536 ≈ an H100/H200 with an 8×8
 * micro tile's register use) runs the tiles in waves; a wave costs one tile's per-thread work over
 * the variant's efficiency. Big tiles win on big problems (fewer bytes per FLOP), small tiles when
 * big ones would leave the GPU idle or pad an awkward N (the vocab-65 GEMMs pick 128×32).
 */
export function chooseMatmulVariant(
  shape: MatmulShape,
  limits: LimitsLike = DEFAULT_LIMITS,
  opts: { parallelThreads?: number } = {},
): string {
  const P = opts.parallelThreads ?? 65536;
  let best = '';
  let bestCost = Infinity;
  for (const v of availableVariants(limits)) {
    const threads = variantThreads(v);
    const tiles = Math.ceil(shape.M / v.BM) * Math.ceil(shape.N / v.BN);
    const waves = Math.ceil(tiles / Math.max(1, Math.floor(P / threads)));
    const cost = (waves * v.BM * v.BN * Math.max(shape.K, v.BK)) / threads / v.eff;
    if (cost < bestCost * (1 - 1e-9)) {
      bestCost = cost;
      best = v.name;
    }
  }
  if (!best) throw new Error('matmul: no variant fits this device\'s limits');
  return best;
}

// ---- shader assembly -------------------------------------------------------------------------

const ioSections = new Map<string, string>();
for (const part of ioSrc.split(/^\/\/--- /m).slice(1)) {
  const nl = part.indexOf('\n');
  ioSections.set(part.slice(0, nl).trim(), part.slice(nl + 1));
}

function section(name: string): string {
  const s = ioSections.get(name);
  if (s === undefined) throw new Error(`matmul_io.wgsl: missing section '${name}'`);
  return s;
}

const codeCache = new Map<string, string>();

/** The WGSL for one choice of vec4/scalar access per operand (A, B, C). */
export function matmulCode(vecA: boolean, vecB: boolean, vecC: boolean): string {
  const key = `${+vecA}${+vecB}${+vecC}`;
  let code = codeCache.get(key);
  if (!code) {
    code = [
      section(vecA ? 'a_vec4' : 'a_scalar'),
      section(vecB ? 'b_vec4' : 'b_scalar'),
      section(vecC ? 'c_vec4' : 'c_scalar'),
      matmulSrc,
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

/** The variant autotuneMatmul picked for this shape on this device, if any. */
export function tunedVariant(rt: Runtime, s: MatmulShape): string | undefined {
  return tuned.get(rt.device)?.get(shapeKey(s));
}

export function setTunedVariant(rt: Runtime, s: MatmulShape, name: string): void {
  setTunedKey(rt, shapeKey(s), name);
}

function setTunedKey(rt: Runtime, key: string, name: string): void {
  getVariant(name);
  let m = tuned.get(rt.device);
  if (!m) tuned.set(rt.device, (m = new Map()));
  m.set(key, name);
}

/** The picks so far as plain JSON (shapeKey → variant), to save next to a run's config. */
export function tunedTable(rt: Runtime): Record<string, string> {
  return Object.fromEntries(tuned.get(rt.device) ?? []);
}

/** Restores saved picks; names that fit this device's limits only (a table from another GPU). */
export function loadTunedTable(rt: Runtime, table: Record<string, string>): void {
  for (const [key, name] of Object.entries(table)) {
    const v = MATMUL_VARIANTS.find((x) => x.name === name);
    if (v && variantFits(v, rt.device.limits)) setTunedKey(rt, key, name);
  }
}

// ---- dispatch building -----------------------------------------------------------------------

function bindingBytes(b: Binding): number {
  if (typeof (b as GPUBuffer).mapAsync === 'function') return (b as GPUBuffer).size;
  const s = b as BufSlice;
  return s.size ?? s.buffer.size - (s.offset ?? 0);
}

function checkArgs(args: MatmulArgs): void {
  const { label, M, N, K } = args;
  for (const [n, v] of [['M', M], ['N', N], ['K', K]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${label}: ${n} must be an integer ≥ 1, got ${v}`);
  }
  for (const [n, b, elems] of [['a', args.a, M * K], ['b', args.b, K * N], ['c', args.c, M * N]] as const) {
    const have = bindingBytes(b);
    if (have < elems * 4) throw new Error(`${label}: binding ${n} has ${have} bytes, needs ${elems * 4}`);
  }
}

export interface BuiltMatmul {
  dispatch: Dispatch;
  /** The per-call uniform block (free it with rt.mem.free when the dispatch is dropped). */
  uniform: GPUBuffer;
  variant: string;
}

/** matmul() plus the uniform buffer it allocated (benchmarks and the autotuner free it). */
export function buildMatmul(rt: Runtime, args: MatmulArgs): BuiltMatmul {
  checkArgs(args);
  const { M, N, K, transA = false, transB = false } = args;
  const name = args.variant ?? tunedVariant(rt, args) ?? chooseMatmulVariant(args, rt.device.limits);
  const v = getVariant(name);
  if (!variantFits(v, rt.device.limits)) throw new Error(`${args.label}: variant ${name} exceeds this device's limits`);
  // vec4 bindings also need 16-byte offsets (the convention is 256; checked, not assumed).
  const aligned = (b: Binding) => ((b as BufSlice).offset ?? 0) % 16 === 0;
  const vf = vectorFlags(args);
  const [vecA, vecB, vecC] = [vf.vecA && aligned(args.a), vf.vecB && aligned(args.b), vf.vecC && aligned(args.c)];
  const accumulate = args.accumulate ?? false;
  const specialize = args.specialize ?? true;
  const flags = (transA ? 1 : 0) | (transB ? 2 : 0) | (accumulate ? 4 : 0);
  const uniform = rt.uniform(args.label,
    new Uniforms().u32(M).u32(N).u32(K).f32(args.alpha ?? 1).u32(flags).u32(v.BK).u32(0).u32(0));
  // A dynamic pipeline must not differ by the flags, or it would not be shared.
  const f: Record<string, number> = specialize ? { TRANS_A: +transA, TRANS_B: +transB, ACCUM: +accumulate } : {};
  const dispatch = rt.kernel({
    label: `${args.label}[matmul ${name}${transA ? ' tA' : ''}${transB ? ' tB' : ''}]`,
    code: matmulCode(vecA, vecB, vecC),
    entryPoint: 'main',
    constants: { ...f, SPECIALIZE: +specialize, BM: v.BM, BN: v.BN, BK: v.BK, TM: v.TM, TN: v.TN },
    bindings: [args.a, args.b, args.c, uniform],
    workgroups: [Math.ceil(N / v.BN), Math.ceil(M / v.BM)],
  });
  return { dispatch, uniform, variant: name };
}

/** C (+)= alpha·op(A)·op(B) as one Dispatch, built once and re-run with rt.run. */
export function matmul(rt: Runtime, args: MatmulArgs): Dispatch {
  return buildMatmul(rt, args).dispatch;
}

export function matmulFlops(s: MatmulShape): number {
  return 2 * s.M * s.N * s.K;
}

// ---- autotuning ------------------------------------------------------------------------------

export interface AutotuneOptions {
  /** Candidates (default: all that fit the device). */
  variants?: string[];
  warmup?: number;
  reps?: number;
  /** Dispatches per timed pass (default: enough for ~1 GFLOP, at most 20). */
  inner?: number;
}

export interface AutotuneResult {
  shape: MatmulShape;
  variant: string;
  /** Median ms of one GEMM, per candidate. */
  timesMs: Record<string, number>;
  method: 'timestamp' | 'wallclock';
}

/** Deterministic non-zero operand data (zeros can run faster than real data on some GPUs). */
function fillPattern(n: number, seed: number): Float32Array {
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
  free(): void;
}

/** Workspace buffers for timing one shape (filled with a fixed pattern). */
export function gemmOperands(rt: Runtime, s: MatmulShape, label = 'gemm'): GemmOperands {
  const a = rt.upload('workspace', `${label}.a`, fillPattern(s.M * s.K, 1));
  const b = rt.upload('workspace', `${label}.b`, fillPattern(s.K * s.N, 2));
  const c = rt.createBuffer('workspace', `${label}.c`, s.M * s.N * 4);
  return { a, b, c, free: () => [a, b, c].forEach((x) => rt.mem.free(x)) };
}

/** Times one built GEMM: median ms per GEMM, repeated `inner` times per pass. */
export async function timeMatmul(
  rt: Runtime, d: Dispatch, s: MatmulShape, opts: { warmup?: number; reps?: number; inner?: number } = {},
): Promise<{ ms: number; method: 'timestamp' | 'wallclock' }> {
  const inner = opts.inner ?? Math.min(20, Math.max(1, Math.round(1e9 / matmulFlops(s))));
  const r = await timeDispatches(rt, new Array<Dispatch>(inner).fill(d), { warmup: opts.warmup, reps: opts.reps ?? 5 });
  return { ms: r.medianMs / inner, method: r.method };
}

/**
 * Times every candidate variant on each shape on this GPU and caches the fastest, so later
 * matmul() calls for the same (M,N,K,transA,transB) use it. Call before building the model.
 */
export async function autotuneMatmul(rt: Runtime, shapes: MatmulShape[], opts: AutotuneOptions = {}): Promise<AutotuneResult[]> {
  const candidates = (opts.variants ?? availableVariants(rt.device.limits).map((v) => v.name))
    .filter((n) => variantFits(getVariant(n), rt.device.limits));
  if (candidates.length === 0) throw new Error('autotuneMatmul: no candidate variant fits this device');
  const results: AutotuneResult[] = [];
  for (const shape of shapes) {
    const ops = gemmOperands(rt, shape, 'autotune');
    const timesMs: Record<string, number> = {};
    let method: AutotuneResult['method'] = 'wallclock';
    try {
      for (const name of candidates) {
        const built = buildMatmul(rt, { label: 'autotune', ...shape, a: ops.a, b: ops.b, c: ops.c, variant: name });
        const t = await timeMatmul(rt, built.dispatch, shape, opts);
        rt.mem.free(built.uniform);
        timesMs[name] = t.ms;
        method = t.method;
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
