/**
 * The INT8 kernels of the weight-gradient GEMM dW = dYᵀ·X, whose reduction runs over the tokens,
 * and of the input-gradient GEMM's weight operand:
 *   quantizeTransposedI8 — INT8 codes of xᵀ read straight from x [R, CN] (no fp32 transposed copy),
 *                          one scale per column and block of G rows (src/engine/kernels/qgemm/transpose-quant.wgsl);
 *   quantizeColumnsI8    — the same with one scale per column over all R rows, spread over tiles of
 *                          rows (two dispatches): the operands of dW on qgemmI8 (tensor cores) and
 *                          dX's Wᵀ per input channel;
 *   qgemmI8Blocked       — C (+)= Σ_blocks diag(sa_b)·(QA_b·QB_bᵀ)·diag(sb_b), dot4I8Packed, scales
 *                          that change every G elements of K (src/engine/kernels/qgemm/block.wgsl).
 * References: ./qgemm-block.ref.ts.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import tqSrc from './transpose-quant.wgsl?raw';
import blockSrc from './block.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';
import { noteChoice, tunedPicks } from '../../tune/store';

const TQ_CODE = `${codecSrc}\n${tqSrc}`;
/** Byte offset of `seed` in transpose-quant's Params (R, CN, G, seed, ...). */
const TQ_SEED_OFFSET = 12;
/** The longest block whose codes transpose-quant stages in workgroup memory (64 columns × G/4 + 1 words). */
const STAGED_MAX_ROWS = 256;

/**
 * How transpose-quant moves a tile: its codes staged in workgroup memory or stored by each lane;
 * rows of 1 or 4 words loaded before encoding; `registers`: quantizeColumnsI8 encodes with
 * col_encode_rt (8 columns × 4 rows per lane, transposed in registers) where CN % 8 == 0, and takes
 * the tiles' absmax the same way (col_absmax_rt) where the tiles are 256 rows.
 */
export interface TransposeQuantVariant { staged: boolean; loads: 1 | 4; registers?: boolean }
export const TQ_VARIANTS: Record<string, TransposeQuantVariant> = {
  direct1: { staged: false, loads: 1 }, direct4: { staged: false, loads: 4 }, staged1: { staged: true, loads: 1 }, staged4: { staged: true, loads: 4 },
  regs: { staged: false, loads: 4, registers: true },
};
const DEFAULT_TQ = 'regs';
const tqVariants = new WeakMap<Runtime, TransposeQuantVariant>();

/** The variant every transposed quantizer of this runtime builds (benchmarks time each); undefined: the tuned or default one per shape. */
export function setTransposeQuantVariant(rt: Runtime, v: TransposeQuantVariant | undefined): void {
  if (v) tqVariants.set(rt, v);
  else tqVariants.delete(rt);
}

/** The key of a transposed quantizer's call (the tuner's i8quant jobs): x [R, CN] in blocks of G rows, or 'all' (quantizeColumnsI8). */
export const i8QuantKey = (R: number, CN: number, G: number | 'all') => `${R}x${CN}/${G}`;

/** A TQ_VARIANTS name, or undefined (a stale or hostile cache pick; TQ_VARIANTS's own keys only). */
export const tqVariantNamed = (name: string): TransposeQuantVariant | undefined => (Object.hasOwn(TQ_VARIANTS, name) ? TQ_VARIANTS[name] : undefined);

/** The form a call of `key` builds: the runtime's forced one, the one tuned for it on this device (tune/i8-quant.ts), else the default. */
export function tqVariantFor(rt: Runtime, key: string): { name?: string; variant: TransposeQuantVariant } {
  const forced = tqVariants.get(rt);
  if (forced) {
    noteChoice(rt.device, 'i8quant', key, 'forced');
    return { variant: forced };
  }
  for (const name of tunedPicks(rt.device, 'i8quant', key) ?? []) {
    const v = tqVariantNamed(name);
    if (v) {
      noteChoice(rt.device, 'i8quant', key, 'tuned');
      return { name, variant: v };
    }
  }
  noteChoice(rt.device, 'i8quant', key, 'heuristic');
  return { name: DEFAULT_TQ, variant: TQ_VARIANTS[DEFAULT_TQ] };
}

/** transpose-quant's override constants for a block of G rows (TW > 0 only where a staged tile fits). */
function tqConstants(v: TransposeQuantVariant, COLS: number, LANES: number, G: number): Record<string, number> {
  const TW = G <= STAGED_MAX_ROWS ? G / 4 : 0;
  return { COLS, LANES, TW, STAGE: v.staged && TW > 0 ? 1 : 0, LF: v.loads };
}

export interface TransposedQuantize {
  dispatch: Dispatch;
  /** Rewrites the stochastic-rounding seed of the next runs (no-op for nearest). */
  setSeed(seed: number): void;
}

/**
 * codes [CN, R/4] u32 and scales [CN, R/G] of xᵀ for x [R, CN]: R % G == 0, G % 4 == 0 (whole
 * words per block). G = R gives one scale per column of x (per row of xᵀ).
 */
export function quantizeTransposedI8(rt: Runtime, a: {
  label: string; x: Binding; R: number; CN: number; G: number; codes: Binding; scales: Binding;
  rounding?: 'nearest' | 'stochastic'; seed?: number;
  /** This form instead of the runtime's choice for the shape (the tuner times each). */
  variant?: TransposeQuantVariant;
}): TransposedQuantize {
  const { R, CN, G } = a;
  for (const [k, v] of Object.entries({ R, CN, G })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${a.label}: ${k}=${v} must be a positive integer`);
  }
  if (R % G || G % 4) throw new Error(`${a.label}: block ${G} must be a multiple of 4 dividing R=${R}`);
  if (R / G > 65535) throw new Error(`${a.label}: ${R / G} blocks exceed one dispatch dimension`);
  // Blocks up to 256 rows: 64 columns per workgroup (a tile that may be staged, tqConstants); longer
  // ones (a whole column: quantizeColumnsI8 is the fast form): more lanes per column.
  const [COLS, LANES] = G <= STAGED_MAX_ROWS ? [64, 4] : [16, 16];
  const u = new Uniforms().u32(R).u32(CN).u32(G).u32(a.seed ?? 0).u32(a.rounding === 'stochastic' ? 1 : 0).u32(0).u32(0).u32(0);
  const params = rt.uniform(`${a.label}.tq`, u);
  return {
    dispatch: rt.kernel({
      label: `${a.label}.tq`,
      code: TQ_CODE,
      entryPoint: 'main',
      constants: tqConstants(a.variant ?? tqVariantFor(rt, i8QuantKey(R, CN, G)).variant, COLS, LANES, G),
      bindings: [params, a.x, a.scales, a.codes],
      workgroups: [Math.ceil(CN / COLS), R / G],
    }),
    setSeed: (seed: number) => {
      if (a.rounding === 'stochastic') rt.write(params, Uint32Array.of(seed >>> 0), TQ_SEED_OFFSET);
    },
  };
}

/** Rows per tile of quantizeColumnsI8: the largest power of two ≤ 256 dividing R (R % 4 == 0). */
export function columnTileRows(R: number): number {
  if (!Number.isInteger(R) || R < 4 || R % 4) throw new Error(`quantizeColumnsI8: R=${R} must be a positive multiple of 4`);
  let t = 256;
  while (R % t) t /= 2;
  return t;
}

/** u32 words of quantizeColumnsI8's absmax scratch for x [R, CN]: one per column and tile. */
export const columnAbsmaxWords = (R: number, CN: number) => (R / columnTileRows(R)) * CN;

/**
 * codes [CN, R/4] u32 and scales [CN] of xᵀ for x [R, CN], one scale per column of x: the codes
 * of quantizeTransposedI8 with G = R, but the rows split into tiles so that every SM has work
 * (that kernel gives a column to one workgroup): the tiles' absmax per column into `amax`
 * (columnAbsmaxWords), then each tile takes its column's max over them and encodes.
 */
export function quantizeColumnsI8(rt: Runtime, a: {
  label: string; x: Binding; R: number; CN: number; codes: Binding; scales: Binding; amax: Binding;
  rounding?: 'nearest' | 'stochastic'; seed?: number;
  /** This form instead of the runtime's choice for the shape (the tuner times each). */
  variant?: TransposeQuantVariant;
}): { dispatches: Dispatch[]; setSeed(seed: number): void } {
  const { R, CN } = a;
  if (!Number.isInteger(CN) || CN < 1) throw new Error(`${a.label}: CN=${CN} must be a positive integer`);
  const G = columnTileRows(R);
  if (R / G > 65535) throw new Error(`${a.label}: ${R / G} row tiles exceed one dispatch dimension`);
  const u = new Uniforms().u32(R).u32(CN).u32(G).u32(a.seed ?? 0).u32(a.rounding === 'stochastic' ? 1 : 0).u32(0).u32(0).u32(0);
  const params = rt.uniform(`${a.label}.cq`, u);
  const grid: [number, number] = [Math.ceil(CN / 64), R / G];
  const v = a.variant ?? tqVariantFor(rt, i8QuantKey(R, CN, 'all')).variant;
  const constants = tqConstants(v, 64, 4, G);
  const inRegisters = v.registers === true && CN % 8 === 0;
  const encodeGrid: [number, number] = inRegisters ? [Math.ceil(CN / 32), Math.ceil(R / 256)] : grid;
  const absmaxRt = inRegisters && G === 256; // one 256-row tile per workgroup of col_absmax_rt
  return {
    dispatches: [
      rt.kernel({
        label: `${a.label}.cq.absmax`, code: TQ_CODE, entryPoint: absmaxRt ? 'col_absmax_rt' : 'col_absmax', constants,
        bindings: [params, a.x, a.amax], workgroups: absmaxRt ? encodeGrid : grid,
      }),
      rt.kernel({
        label: `${a.label}.cq`, code: TQ_CODE, entryPoint: inRegisters ? 'col_encode_rt' : 'col_encode', constants,
        bindings: [params, a.x, a.scales, a.codes, a.amax], workgroups: encodeGrid,
      }),
    ],
    setSeed: (seed: number) => {
      if (a.rounding === 'stochastic') rt.write(params, Uint32Array.of(seed >>> 0), TQ_SEED_OFFSET);
    },
  };
}

/**
 * C [M, N] (+)= Σ_b (f32(Σ_{k∈b} qa[m,k]·qb[n,k]) · sa[m,b]) · sb[n,b], blocks b of G along K.
 * aq [M, K/4] u32, sa [M, K/G], bq [N, K/4] u32, sb [N, K/G]. K % G == 0, G ∈ {32, 64, 128, 256}.
 */
export function qgemmI8Blocked(rt: Runtime, a: {
  label: string; aq: Binding; sa: Binding; bq: Binding; sb: Binding; c: Binding;
  M: number; N: number; K: number; G: number; accumulate?: boolean;
}): Dispatch {
  const { M, N, K, G } = a;
  for (const [k, v] of Object.entries({ M, N, K })) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${a.label}: ${k}=${v} must be a positive integer`);
  }
  if (![32, 64, 128, 256].includes(G) || K % G) throw new Error(`${a.label}: block ${G} must be 32, 64, 128 or 256 and divide K=${K}`);
  if (G >= 132_000) throw new Error(`${a.label}: block ${G} risks i32 overflow`);
  const u = new Uniforms().u32(M).u32(N).u32(K / 4).u32(K / G);
  return rt.kernel({
    label: a.label,
    code: blockSrc,
    constants: { BM: 64, BN: 64, BKW: 8, GW: G / 4, TM: 4, TN: 4, ACC: a.accumulate ? 1 : 0 },
    bindings: [a.aq, a.sa, a.bq, a.sb, a.c, rt.uniform(a.label, u)],
    workgroups: [Math.ceil(N / 64), Math.ceil(M / 64)],
  });
}
