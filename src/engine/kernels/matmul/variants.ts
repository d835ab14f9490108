/**
 * The fp32 GEMM's tile shapes (src/engine/kernels/matmul/matmul.wgsl). Variants differ in block tile (BM×BN×BK),
 * micro tile (TM×TN), whether the next k-tile is staged in registers across the FMAs (prefetch),
 * the launch order (swizzle) and the LEAN text; all are the same WGSL with different `override`
 * constants, so one correctness suite covers them all.
 */
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
   * differently: faster on some shapes, slower on others, so tuning picks.
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
  tile(256, 128, 8, 8, 16, 1.0),
  tile(128, 256, 8, 8, 16, 1.03),
  tile(128, 128, 16, 8, 16, 1.0),
  tile(128, 128, 8, 8, 16, 1.05),
  tile(128, 128, 8, 8, 16, 1.04, { swizzle: 8 }),
  tile(128, 128, 8, 8, 16, 1.03, { prefetch: false }),
  tile(128, 64, 16, 8, 8, 0.88),
  tile(64, 128, 16, 8, 8, 0.88),
  tile(64, 64, 16, 8, 8, 0.8),
  tile(128, 32, 16, 8, 4, 0.72),
  tile(64, 64, 16, 4, 4, 0.5),
  tile(32, 32, 16, 4, 4, 0.45),
  // The LEAN text of the tiles the H200 tables pick (priors just below their twins': measured per shape).
  tile(128, 128, 8, 8, 16, 1.06, { lean: true }),
  tile(128, 256, 8, 8, 16, 1.04, { lean: true }),
  tile(128, 128, 8, 8, 8, 0.995, { lean: true }),
  tile(256, 128, 8, 8, 8, 0.965, { lean: true }),
  tile(64, 64, 16, 8, 8, 0.795, { lean: true }),
];

export type LimitsLike = Pick<GPUSupportedLimits,
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
