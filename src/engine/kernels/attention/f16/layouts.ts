/**
 * The f16 attention's candidates: the block layouts tried per configuration (forward, and backward
 * pairs of dq and dk/dv layouts), the candidate specs built from them in the order they are checked
 * (./checks.ts enableF16Attention; the tuner times them all), and the backward's spec pair.
 */
import { f16AttnLabel, type F16AttnSpec } from './code';
import { f16AttnBwdPairError, f16AttnBwdSpecError } from './code-bwd';

/** The backward's two kernels' specs (./code-bwd.ts): dq (own rows queries, BKV keys a step) and dk/dv (own rows keys, BKV queries a step). */
export interface F16AttnBwdSpecs { dq: F16AttnSpec; dkdv: F16AttnSpec }

export const f16AttnBwdLabel = (s: F16AttnBwdSpecs) => `backward dq ${f16AttnLabel(s.dq)}; dkdv ${f16AttnLabel(s.dkdv)}`;

/** A spec's layout fields (a layout list's entry). */
export type F16AttnLayout = Pick<F16AttnSpec, 'sgCount' | 'BKV' | 'PAD' | 'load' | 'ds' | 'split' | 'prefetch' | 'wide' | 'contig' | 'dense' | 'uniform' | 'nomask' | 'colwise'>;

/** A backward layout: one both kernels share, or the dq and dk/dv kernels' apart. */
export type F16AttnBwdLayout = F16AttnLayout | { dq: F16AttnLayout; dkdv: F16AttnLayout };

export const f16AttnBwdLayoutPair = (l: F16AttnBwdLayout): { dq: F16AttnLayout; dkdv: F16AttnLayout } => ('dq' in l ? l : { dq: l, dkdv: l });

/** Block layouts tried per configuration, first that passes wins (bench/f16-attn-device.ts times them). */
// Staged (vector loads into workgroup memory) first: matrix loads from storage ran the forward at 0.64x
// the staged fp32 kernel on an H100 (0.615 vs 0.402 ms a layer); 'direct' stays as a candidate to time.
export const F16_ATTN_LAYOUTS: Pick<F16AttnSpec, 'sgCount' | 'BKV' | 'PAD' | 'load' | 'dense' | 'uniform'>[] = [
  { sgCount: 4, BKV: 64, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 64, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 64, PAD: 8, load: 'direct' }, // the fastest direct one measured (0.536 ms)
  { sgCount: 4, BKV: 64, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'direct' },
  { sgCount: 8, BKV: 32, PAD: 8, load: 'direct' }, // fits 48 KiB at D32 only (46 KB; its S and O scratches make 78 KB at D64)
  // Not yet timed: staged ones without their causal skips (spec.dense).
  { sgCount: 4, BKV: 64, PAD: 8, load: 'staged', dense: true },
  { sgCount: 2, BKV: 64, PAD: 8, load: 'staged', dense: true },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'staged', dense: true },
  { sgCount: 4, BKV: 64, PAD: 8, load: 'staged', uniform: true }, // the skips kept, as uniform branches (spec.uniform)
];

/**
 * Backward layouts tried per configuration, first that passes wins (enableF16Attention; the tuner times them all).
 * First the fastest measured on the H100 (s28c4, base, a layer with Di): stored dS, dq BQ64/BKV64 and split dk/dv
 * BQ32/BKV32, 0.591 ms against 0.705 for the recomputing BQ32/BKV16 pair (a run without a dS scratch takes the next).
 * Then staged, the faster measured first (H100, dq + dk/dv a layer, staged: BQ32/BKV16 0.745 ms,
 * BQ64/BKV16 0.819, BQ32/BKV32 0.952, BQ64/BKV32 1.176); then the same reading the copies directly.
 * Then pairs of dq and dk/dv layouts (bench/f16-attn-device.ts 'backward candidates'; s28c4 timed those
 * without prefetch, contig or wide: 0.601-0.765 ms), likeliest fastest first:
 * - stored dS (spec.ds): dk/dv as the fastest recompute layout (BQ32/BKV16) plus 16-byte dS stores, and
 *   dq a GEMM over the stored dS, which can take bigger blocks than the recomputing dq (no S/dP scratch);
 * - split dk/dv (spec.split): paired subgroups share 2·M keys, one computing Sᵀ and dv, the other dPᵀ
 *   and dk, so each right tile loaded serves two products (matrix loads a block: 10 instead of 18 per
 *   subgroup at BKV16, D64);
 * - prefetched dk/dv (spec.prefetch): the next query block's Q and dO rows are loaded into registers
 *   while this block's products run (its global-load latency hidden inside the workgroup) and staged
 *   into the other half of a double buffer, so a block needs 3 barriers instead of 4;
 * - wide dq from dS (spec.wide): 2·M query rows a subgroup, each K tile loaded serving two products;
 * - contiguous softmax columns in dk/dv (spec.contig): a lane's 8 (BKV16) columns adjacent, so its Ss
 *   loads and Pᵀ/dSᵀ stores may merge into 16-byte ones (times whether the compiler does);
 * - then (not yet timed) dense (no per-tile skip branches around the products), uniform (the skips as
 *   uniform branches), nomask (dk/dv's blocks past the diagonal unmasked), colwise (dk/dv's SIMT by
 *   columns) and dq from dS matrix-loading the stored tiles (load 'direct'): whether the products'
 *   branches, the SIMT's workgroup accesses or dq's staging limit.
 */
export const F16_ATTN_BWD_LAYOUTS: F16AttnBwdLayout[] = [
  // H100 (s29c1): 0.515 ms a base layer against 0.596 for the next (wide dq blocks: two row tiles a subgroup).
  { dq: { sgCount: 4, BKV: 64, PAD: 8, wide: true, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true } },
  { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 16, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 16, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 16, PAD: 8, load: 'direct' },
  { sgCount: 2, BKV: 32, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'direct' },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, contig: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', contig: true, ds: true } },
  { dq: { sgCount: 4, BKV: 32, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 2, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'direct', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 32, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 2, BKV: 64, PAD: 8, wide: true, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, wide: true, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true } },
  // Not yet timed: the first pair without its causal skips (spec.dense; the split pair's skips never skip at
  // sgCount 2), and with it bigger or prefetched dk/dv query blocks (BKV64: 45 KB of workgroup memory), or
  // wide dq blocks (two row tiles a subgroup, each K tile loaded serving both).
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 64, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 64, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 2, BKV: 64, PAD: 8, wide: true, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  // Dense, layouts the skips may have held back: split dk/dv of one pair at BKV16 and of two pairs at BKV32
  // (46 KB), and the recomputing pair (runs without a dS scratch).
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 4, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, dense: true } },
  // The skips kept as uniform branches (spec.uniform): the default pair, and split dk/dv of two pairs (whose skips skip).
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, uniform: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, uniform: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, uniform: true }, dkdv: { sgCount: 4, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, uniform: true } },
  // Blocks past the diagonal without the mask's compares and selects (spec.nomask): the default pair, and dense.
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, nomask: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, nomask: true, ds: true, dense: true } },
  // dq matrix-loading dS's tiles as stored (load 'direct': no dSᵀ staging, half its stores): with the default
  // dk/dv, and uniform (one and two row tiles a subgroup) with the dense default dk/dv.
  { dq: { sgCount: 4, BKV: 64, PAD: 8, load: 'direct', ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, load: 'direct', ds: true, uniform: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, load: 'direct', wide: true, ds: true, uniform: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true, dense: true } },
  // dk/dv's SIMT by columns (spec.colwise: lse and Di once a block, conflict-free rows): the default pair, and dense with nomask.
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, colwise: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true, dense: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, nomask: true, colwise: true, ds: true, dense: true } },
  // All of them at once: direct uniform dq, dense nomask colwise dk/dv at BKV32 and 64.
  { dq: { sgCount: 4, BKV: 64, PAD: 8, load: 'direct', ds: true, uniform: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, nomask: true, colwise: true, ds: true, dense: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, load: 'direct', ds: true, uniform: true }, dkdv: { sgCount: 2, BKV: 64, PAD: 8, load: 'staged', split: true, nomask: true, colwise: true, ds: true, dense: true } },
];

/** Candidate specs for head dim D: each f16 → f32 configuration (largest tile first) with each layout that fits. */
export function f16AttnCandidates(cfgs: F16AttnSpec['cfg'][], D: number, sgSize: number, valid: (s: F16AttnSpec) => boolean, layouts = F16_ATTN_LAYOUTS): F16AttnSpec[] {
  return cfgs.flatMap((cfg) => layouts.map((l): F16AttnSpec => ({ cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, D, sgSize, ...l }))).filter(valid);
}

/** Backward candidates for head dim D: per configuration each layout (or pair of layouts) both kernels fit (`direct`: reading f16 copies, the model's variant), in the list's order. */
export function f16AttnBwdCandidates(cfgs: F16AttnSpec['cfg'][], D: number, sgSize: number, lim: { maxComputeWorkgroupStorageSize: number; maxComputeInvocationsPerWorkgroup: number },
  layouts = F16_ATTN_BWD_LAYOUTS, emulate = false, direct = true): F16AttnBwdSpecs[] {
  const fits = (p: F16AttnBwdSpecs) => !f16AttnBwdPairError(p)
    && (['dq', 'dkdv'] as const).every((k) => !f16AttnBwdSpecError(k, p[k], lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, emulate, direct));
  return cfgs.flatMap((cfg) => layouts.map((l) => {
    const { dq, dkdv } = f16AttnBwdLayoutPair(l);
    const spec = (x: F16AttnLayout): F16AttnSpec => ({ cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, D, sgSize, ...x });
    return { dq: spec(dq), dkdv: spec(dkdv) };
  })).filter(fits);
}

/**
 * The first backward candidate that passes `check` (in order, checking no more than needed), and the
 * first passing one that recomputes dq (no dS scratch: TP): the same one unless the first stores dS.
 */
export async function firstPassingBwd(candidates: F16AttnBwdSpecs[], check: (s: F16AttnBwdSpecs) => Promise<boolean>): Promise<{ first?: F16AttnBwdSpecs; recompute?: F16AttnBwdSpecs }> {
  let first: F16AttnBwdSpecs | undefined;
  for (const c of candidates) {
    if (first && c.dq.ds) continue;
    if (!(await check(c))) continue;
    first ??= c;
    if (!c.dq.ds) return { first, recompute: c };
  }
  return { first };
}
