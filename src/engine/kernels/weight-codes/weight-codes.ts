/**
 * The INT8 codes of many weight matrices, all read from one flat fp32 buffer, in one dispatch per
 * form (src/engine/kernels/weight-codes/weight-codes.wgsl), instead of one quantizer per GEMM:
 *   rows    per row of W [rows, L] (the forward's W per output channel): buildQuantize's int8 'row' codes;
 *   columns per column of W [R, CN] over all its rows, codes of Wᵀ [CN, R/4] (dX's W per input
 *           channel): quantizeColumnsI8's codes; two dispatches (tile maxima, then encode).
 * Each is driven by a table of entries (writeTables puts them in a small storage buffer); every
 * entry names where its tensor lies in the weights and where its codes and scales go, so a GEMM
 * binds one tensor's codes as a slice. Round to nearest (weights have no stochastic rounding).
 * Reference: ./weight-codes.ref.ts.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import wcSrc from './weight-codes.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';

const WC_CODE = `${codecSrc}\n${wcSrc}`;
/** u32 words per table entry (RowEntry / ColEntry in the shader). */
const ENTRY_WORDS = 8;
/** Rows per tile of the column kernels (and of their absmax scratch). */
export const WC_COL_TILE_ROWS = 128;
const COL_TILE_COLS = 32;
/** Rows per workgroup of wc_rows. */
const ROWS_PER_WG = 8;

/** Rows of W [rows, rowLength] at float `x` of the weights; codes at byte `q`, scales at byte `s`. */
export interface RowCodesEntry { x: number; rows: number; rowLength: number; q: number; s: number }
/** W [R, CN] at float `x`; codes of Wᵀ at byte `q`, scales [CN] at byte `s`, tile maxima at word `a` of the scratch. */
export interface ColCodesEntry { x: number; R: number; CN: number; q: number; s: number; a: number }

/** u32 words of an entry's tile maxima: one per column and tile of WC_COL_TILE_ROWS rows. */
export const colCodesAmaxWords = (R: number, CN: number) => Math.ceil(R / WC_COL_TILE_ROWS) * CN;
/** Bytes of a table of n entries. */
export const weightCodesTableBytes = (n: number) => n * ENTRY_WORDS * 4;

const colWorkgroups = (e: ColCodesEntry) => Math.ceil(e.CN / COL_TILE_COLS) * Math.ceil(e.R / WC_COL_TILE_ROWS);

function check(label: string, what: string, v: number, mult = 1): void {
  if (!Number.isInteger(v) || v < 0 || v % mult || v >= 2 ** 32) throw new Error(`${label}: ${what} ${v} must be a non-negative integer multiple of ${mult} below 2^32`);
}

function checkRows(label: string, es: readonly RowCodesEntry[]): void {
  for (const e of es) {
    if (e.rows < 1 || e.rowLength < 4) throw new Error(`${label}: an entry of ${e.rows} rows of ${e.rowLength}`);
    for (const [k, v, m] of [['x', e.x, 4], ['rowLength', e.rowLength, 4], ['q', e.q, 4], ['s', e.s, 4], ['elements', e.rows * e.rowLength, 1]] as const) check(label, k, v, m);
  }
}

function checkCols(label: string, es: readonly ColCodesEntry[]): void {
  for (const e of es) {
    if (e.R < 4 || e.CN < 4) throw new Error(`${label}: an entry of [${e.R}, ${e.CN}]`);
    for (const [k, v, m] of [['x', e.x, 4], ['R', e.R, 4], ['CN', e.CN, 4], ['q', e.q, 4], ['s', e.s, 4], ['a', e.a, 1], ['elements', e.R * e.CN, 1]] as const) check(label, k, v, m);
  }
}

/** The row kernel's table: first row over all entries, vec4 per row, first vec4, code word, scale index. */
export function rowCodesTable(es: readonly RowCodesEntry[]): Uint32Array {
  checkRows('rowCodesTable', es);
  const t = new Uint32Array(es.length * ENTRY_WORDS);
  let row0 = 0;
  es.forEach((e, i) => {
    t.set([row0, e.rowLength / 4, e.x / 4, e.q / 4, e.s / 4], i * ENTRY_WORDS);
    row0 += e.rows;
  });
  return t;
}

/** The column kernels' table: first workgroup over all entries, shape, first vec4, code word, scale index, scratch word. */
export function colCodesTable(es: readonly ColCodesEntry[]): Uint32Array {
  checkCols('colCodesTable', es);
  const t = new Uint32Array(es.length * ENTRY_WORDS);
  let wg0 = 0;
  es.forEach((e, i) => {
    t.set([wg0, e.R, e.CN, e.x / 4, e.q / 4, e.s / 4, e.a], i * ENTRY_WORDS);
    wg0 += colWorkgroups(e);
  });
  return t;
}

/** Workgroups of a dispatch: `n`, at most the device's limit or `max` (tests: the kernels stride over the rest). */
const grid = (rt: Runtime, n: number, max = Infinity): [number] => [Math.min(n, max, rt.device.limits.maxComputeWorkgroupsPerDimension)];

/**
 * One dispatch: the per-row codes of every entry from `x` (the flat weights) into codes / scales.
 * `table` holds rowCodesTable(entries) (written by the caller once: the layout does not change).
 */
export function rowCodes(rt: Runtime, a: {
  label: string; x: Binding; entries: readonly RowCodesEntry[]; table: Binding; codes: Binding; scales: Binding; maxWorkgroups?: number;
}): Dispatch[] {
  checkRows(a.label, a.entries);
  if (!a.entries.length) return [];
  const rows = a.entries.reduce((n, e) => n + e.rows, 0);
  const params = rt.uniform(`${a.label}.rows`, new Uniforms().u32(rows).u32(a.entries.length).u32(0).u32(0));
  return [rt.kernel({
    label: `${a.label}.rows`, code: WC_CODE, entryPoint: 'wc_rows',
    bindings: [params, a.x, a.table, a.scales, a.codes],
    workgroups: grid(rt, Math.ceil(rows / ROWS_PER_WG), a.maxWorkgroups),
  })];
}

/**
 * Two dispatches: the per-column codes of Wᵀ of every entry (tile maxima into `amax`, then the
 * codes). `table` holds colCodesTable(entries); `amax` at least Σ colCodesAmaxWords words (entries' `a`).
 */
export function colCodes(rt: Runtime, a: {
  label: string; x: Binding; entries: readonly ColCodesEntry[]; table: Binding; codes: Binding; scales: Binding; amax: Binding; maxWorkgroups?: number;
}): Dispatch[] {
  checkCols(a.label, a.entries);
  if (!a.entries.length) return [];
  const wgs = a.entries.reduce((n, e) => n + colWorkgroups(e), 0);
  const params = rt.uniform(`${a.label}.cols`, new Uniforms().u32(wgs).u32(a.entries.length).u32(0).u32(0));
  return [
    rt.kernel({ label: `${a.label}.cols.absmax`, code: WC_CODE, entryPoint: 'wc_col_absmax', bindings: [params, a.x, a.table, a.amax], workgroups: grid(rt, wgs, a.maxWorkgroups) }),
    rt.kernel({ label: `${a.label}.cols`, code: WC_CODE, entryPoint: 'wc_col_encode', bindings: [params, a.x, a.table, a.scales, a.codes, a.amax], workgroups: grid(rt, wgs, a.maxWorkgroups) }),
  ];
}
