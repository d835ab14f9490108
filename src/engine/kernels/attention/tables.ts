/**
 * The attention kernels' tiles (attention.ts): how a tile is written, the candidates tried in order,
 * and the tiles measured fastest per GPU model (bench/attn-tune.ts), as matmul-tables.ts holds the GEMM's.
 */
import { adapterMatches, type Gpu } from '../../gpu/device';
import { seedFamily } from '../../tune/adapter';
import type { MeasuredTable } from '../matmul/tables';

export interface AttnTile {
  /** Query rows per tile. */
  BM: number;
  /** Key rows per tile. */
  BN: number;
  /** Threads per workgroup. */
  NT: number;
  /**
   * Register-blocked kernel (each thread owns a block of rows × columns of every tile product)
   * instead of the row-per-thread one. Absent: the row-per-thread kernel.
   */
  blocked?: true;
  /**
   * Blocked dq/dkdv only: the streamed kernel (attn_bwd_*_stream), which re-stages both operand
   * pairs `chunk` vec4 columns of D at a time every tile instead of keeping the own rows resident,
   * so 64×64 tiles fit in 48 KiB. Needs D % 4 == 0 (whole-vec4 global access).
   */
  chunk?: number;
  /** With chunk: fetch the next staging step into registers during the FMAs on the current one. */
  prefetch?: true;
  /**
   * With chunk: stage the other pair's first operand (dq: K, dkdv: Q) chunk by chunk into full rows
   * and keep them for the gradient product instead of staging them again. Needs D/4 % chunk == 0.
   */
  keep?: true;
}
export type AttentionPass = 'fwd' | 'dq' | 'dkdv';

/**
 * A tile as written in the tables: [BM, BN, NT], [BM, BN, NT, true] for the register-blocked kernel,
 * [BM, BN, NT, true, { chunk }] for a blocked variant.
 */
export type AttnTileTuple = [number, number, number] | [number, number, number, true]
  | [number, number, number, true, Omit<AttnTile, 'BM' | 'BN' | 'NT' | 'blocked'>];

export function attnTileOf(e: AttnTileTuple): AttnTile {
  return e[3] ? { BM: e[0], BN: e[1], NT: e[2], blocked: true, ...e[4] } : { BM: e[0], BN: e[1], NT: e[2] };
}

/** `BMxBN/NT`, with a `b` suffix for the register-blocked kernel (how benchmarks print a tile). */
export function attnTileName(t: AttnTile): string {
  return `${t.BM}x${t.BN}/${t.NT}${t.blocked ? 'b' : ''}${t.chunk ? `c${t.chunk}` : ''}${t.prefetch ? 'p' : ''}${t.keep ? 'k' : ''}`;
}

/** Tiles tried largest first by chooseAttentionTile (bench/attn-tune.ts times them all). */
export const ATTENTION_CANDIDATES: Record<AttentionPass, AttnTileTuple[]> = {
  fwd: [[64, 64, 256], [64, 32, 256], [32, 64, 256], [32, 32, 256], [32, 32, 128], [32, 16, 128],
    [16, 16, 128], [16, 16, 64], [16, 8, 64], [8, 8, 64], [8, 8, 32],
    // Register-blocked: last until measured (MEASURED_ATTENTION_TILES picks them where faster). At D 64
    // in 48 KiB: 64x32/256 (45 KiB), 64x32/128, 32x32/128, 64x16/256, 64x16/128 and the smaller ones;
    // 64x64 and 32x64 only at D <= 32.
    [64, 64, 256, true], [64, 32, 256, true], [64, 32, 128, true], [32, 64, 128, true], [32, 64, 64, true],
    [32, 32, 128, true], [64, 16, 256, true], [64, 16, 128, true], [32, 32, 64, true], [32, 16, 64, true],
    [16, 32, 64, true]],
  dq: [[64, 32, 256], [32, 32, 256], [32, 32, 128], [32, 16, 128], [16, 16, 128], [16, 16, 64],
    [8, 8, 64], [8, 8, 32],
    // Register-blocked (4 × RS per thread): last until measured. In 48 KiB, D 64 fits BM + BN <= 80
    // (64×64 needs 85 KiB), D 128 only 16×16/32.
    [64, 64, 256, true], [64, 32, 128, true], [32, 64, 128, true], [64, 16, 64, true], [16, 64, 64, true],
    [32, 32, 64, true], [32, 32, 128, true], [16, 32, 32, true], [16, 16, 32, true], [16, 16, 16, true],
    // Streamed (D % 4 == 0; own rows re-staged each tile; p: prefetched, k: K kept): 64×64 takes 37 KiB
    // at D 64 with chunk 4, 43 KiB kept with chunk 2. All fit the H200 at D 64.
    [64, 64, 256, true, { chunk: 4 }], [64, 64, 256, true, { chunk: 4, prefetch: true }],
    [64, 64, 256, true, { chunk: 2, prefetch: true }], [64, 64, 256, true, { chunk: 2, prefetch: true, keep: true }],
    [64, 64, 256, true, { chunk: 2, keep: true }], [64, 32, 256, true, { chunk: 4, prefetch: true }],
    [64, 32, 256, true, { chunk: 4, prefetch: true, keep: true }], [64, 32, 128, true, { chunk: 4, prefetch: true }],
    [64, 32, 128, true, { chunk: 4, prefetch: true, keep: true }], [32, 64, 128, true, { chunk: 4, prefetch: true, keep: true }]],
  dkdv: [[32, 64, 256], [32, 32, 256], [32, 32, 128], [16, 32, 128], [16, 16, 128], [16, 16, 64],
    [8, 8, 64], [8, 8, 32],
    [64, 64, 256, true], [64, 32, 128, true], [32, 64, 128, true], [64, 16, 64, true], [16, 64, 64, true],
    [32, 32, 64, true], [32, 32, 128, true], [32, 16, 32, true], [16, 16, 32, true], [16, 16, 16, true],
    // Streamed (k: Q kept; 64×64 kept does not fit 48 KiB at D 64).
    [64, 64, 256, true, { chunk: 4 }], [64, 64, 256, true, { chunk: 4, prefetch: true }],
    [64, 64, 256, true, { chunk: 2, prefetch: true }], [32, 64, 256, true, { chunk: 4, prefetch: true }],
    [32, 64, 256, true, { chunk: 4, prefetch: true, keep: true }], [32, 64, 256, true, { chunk: 4, keep: true }],
    [32, 64, 128, true, { chunk: 4, prefetch: true }], [32, 64, 128, true, { chunk: 4, prefetch: true, keep: true }],
    [64, 32, 128, true, { chunk: 4, prefetch: true, keep: true }]],
};

/**
 * The heuristic's order where nothing was tuned and no table applies: the register-blocked and
 * streamed tiles that won every tune so far (H200 table, H100 tune, SwiftShader's micro tune) first,
 * largest first, then ATTENTION_CANDIDATES' order. chooseAttentionTile takes the first that fits.
 */
export const HEURISTIC_ATTENTION_FIRST: Record<AttentionPass, AttnTileTuple[]> = {
  fwd: [[64, 32, 256, true], [64, 32, 128, true], [32, 32, 128, true], [32, 32, 64, true], [16, 32, 64, true]],
  dq: [[64, 32, 256, true, { chunk: 4, prefetch: true }], [64, 64, 256, true, { chunk: 4, prefetch: true }],
    [32, 32, 64, true], [16, 16, 32, true], [16, 16, 16, true]],
  dkdv: [[32, 64, 256, true, { chunk: 4, prefetch: true }], [64, 64, 256, true, { chunk: 4, prefetch: true }],
    [32, 32, 128, true], [32, 32, 64, true], [16, 16, 32, true]],
};

/**
 * Tiles measured fastest per GPU model (bench/attn-tune.ts), keyed `${pass}/D${D}`; `dqDs` the
 * stored-dS backward's dq tile by dqDsTileName (attention-ds.ts), keyed `D${D}`. An entry applies
 * where adapterMatches(match), as in matmul-tables.ts.
 */
export const MEASURED_ATTENTION_TILES: {
  match: MeasuredTable['match']; seeds?: string; source: string; table: Record<string, AttnTileTuple>; dqDs?: Record<string, string>;
}[] = [
  {
    match: { vendor: 'nvidia', device: 'h200' },
    seeds: 'nvidia/hopper',
    source: 'bench/attn-tune.ts on an NVIDIA H200 (driver 580.159.04, Dawn/Vulkan) at 16×512×12×64 '
      + '(base and small shapes agreed; the tunes: docs/records/README.md)',
    table: {
      'fwd/D64': [64, 32, 256, true],
      'dq/D64': [64, 32, 256, true, { chunk: 4, prefetch: true }],
      'dkdv/D64': [32, 64, 256, true, { chunk: 4, prefetch: true }],
      // The INT8-score kernels (attention-i8.ts; bench/attn-i8-tune.ts, base and small shapes agreed).
      'fwdI8/D64': [64, 16, 128, true],
      'dkdvI8/D64': [32, 64, 256, true, { chunk: 4, prefetch: true }],
      // With INT8 dP too (compute.attention_dp; bench/attn-i8-tune.ts at base's shape): the fastest tile it can run.
      'dkdvDp8/D64': [32, 64, 256, true, { chunk: 4, prefetch: true }],
    },
    // bench/attn-tune.ts --passes ds at 16×512×12×64, the fastest with dS in 2 and in 3 chunks.
    dqDs: { D64: '64x16r1c1p' },
  },
];

/** The first value `pick` finds in the measured tables that apply to this GPU (in table order). */
export function measuredFor<T>(gpu: Gpu, pick: (t: (typeof MEASURED_ATTENTION_TILES)[number]) => T | undefined): T | undefined {
  return measuredWithSource(gpu, pick)?.value;
}

/**
 * measuredFor with where the value came from: a table measured on this GPU model (`table`), else
 * one that seeds this adapter's vendor and architecture (`seed`, MeasuredTable.seeds).
 */
export function measuredWithSource<T>(gpu: Gpu, pick: (t: (typeof MEASURED_ATTENTION_TILES)[number]) => T | undefined): { value: T; source: 'table' | 'seed' } | undefined {
  const family = seedFamily(gpu.adapterInfo);
  for (const source of ['table', 'seed'] as const) {
    for (const t of MEASURED_ATTENTION_TILES) {
      const applies = source === 'table' ? adapterMatches(gpu, t.match) : family !== null && t.seeds === family && !adapterMatches(gpu, t.match);
      if (!applies) continue;
      const value = pick(t);
      if (value !== undefined) return { value, source };
    }
  }
  return undefined;
}

/** The candidate tile of a pass whose name (attnTileName) is `name`, if any (a tuned pick read back). */
export function attnTileNamed(pass: AttentionPass, name: string): AttnTile | undefined {
  for (const e of ATTENTION_CANDIDATES[pass]) {
    const t = attnTileOf(e);
    if (attnTileName(t) === name) return t;
  }
  return undefined;
}

