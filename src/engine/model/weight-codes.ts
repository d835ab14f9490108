/**
 * The INT8 GEMMs' weight codes once per step ('per-step', the scheme's weight_codes) instead of
 * quantizing W right before each GEMM ('per-gemm'): the weights change only in AdamW, so the
 * forward's list starts with the codes of every INT8 linear weight — per output channel for the
 * forward GEMMs, per input channel (Wᵀ) for the dX GEMMs — in three dispatches
 * (kernels/weight-codes.ts) into buffers that live for the whole step; the GEMMs bind slices of them.
 * The codes are those of the per-GEMM quantizers bit for bit (same absmax, scale and rounding).
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import {
  type ColCodesEntry, colCodes, colCodesAmaxWords, colCodesTable, type RowCodesEntry, rowCodes, rowCodesTable, weightCodesTableBytes,
} from '../kernels/weight-codes/weight-codes';
import type { LayerCompute } from './compute-plan';
import type { BufferSpec, ModelDims } from './dims';
import type { ParamLayout } from './params';
import { LINEAR } from './plan';

export type WeightCodesMode = 'per-gemm' | 'per-step';

/** The codes of one INT8 GEMM operand (here: a W or Wᵀ) and their scales, as bindings. */
export interface I8Operand { codes: Binding; scales: Binding }

export interface WeightCodesPlan {
  /** Per output channel, keyed by parameter name: layers with an INT8 forward. */
  rows: (RowCodesEntry & { name: string })[];
  /** Per input channel (codes of Wᵀ), keyed by parameter name or gateUpKey: layers with an INT8 dX. */
  cols: (ColCodesEntry & { name: string })[];
  bytes: { rowCodes: number; rowScales: number; colCodes: number; colScales: number; amax: number; table: number };
  /** Byte offset of the column table in `wcodes.table` (the row table starts at 0). */
  colTable: number;
}

/** The key of gate_proj's and up_proj's codes as one [2F, C] matrix (their dX runs as one GEMM: plan.gateUpDx). */
export const gateUpKey = (l: number) => `model.layers.${l}.mlp.gate_up_proj`;

/** Storage-offset alignment of a binding slice (WebGPU's largest minStorageBufferOffsetAlignment). */
const SLICE_ALIGN = 256;
const align = (n: number) => Math.ceil(n / SLICE_ALIGN) * SLICE_ALIGN;

/**
 * Which weights' codes the step keeps and where (null: none — 'per-gemm', or no INT8 forward or dX).
 * Every tensor's codes and scales start at a 256-byte boundary, so a GEMM binds them as slices.
 */
export function weightCodesPlan(mode: WeightCodesMode, d: ModelDims, layout: ParamLayout, layers: { compute: LayerCompute }[],
  training: boolean, gateUpDx: readonly boolean[]): WeightCodesPlan | null {
  if (mode !== 'per-step') return null;
  const rows: WeightCodesPlan['rows'] = [];
  const cols: WeightCodesPlan['cols'] = [];
  const at = { rq: 0, rs: 0, cq: 0, cs: 0, a: 0 };
  layers.forEach(({ compute: c }, l) => {
    const view = (s: string) => layout.byName.get(`model.layers.${l}.${s}.weight`)!;
    if (c.forward === 'int8') {
      for (const s of LINEAR) {
        const v = view(s);
        const [out, inp] = v.shape;
        rows.push({ name: `model.layers.${l}.${s}.weight`, x: v.offset, rows: out, rowLength: inp, q: at.rq, s: at.rs });
        at.rq = align(at.rq + out * inp);
        at.rs = align(at.rs + out * 4);
      }
    }
    if (training && c.dx === 'int8') {
      const col = (name: string, x: number, R: number, CN: number) => {
        cols.push({ name, x, R, CN, q: at.cq, s: at.cs, a: at.a });
        at.cq = align(at.cq + R * CN);
        at.cs = align(at.cs + CN * 4);
        at.a += colCodesAmaxWords(R, CN);
      };
      for (const s of LINEAR) {
        const v = view(s);
        if (gateUpDx[l] && s === 'mlp.up_proj') continue;
        if (gateUpDx[l] && s === 'mlp.gate_proj') col(gateUpKey(l), v.offset, 2 * v.shape[0], v.shape[1]);
        else col(`model.layers.${l}.${s}.weight`, v.offset, v.shape[0], v.shape[1]);
      }
    }
  });
  if (!rows.length && !cols.length) return null;
  const colTable = align(weightCodesTableBytes(rows.length));
  return {
    rows, cols, colTable,
    bytes: { rowCodes: at.rq, rowScales: at.rs, colCodes: at.cq, colScales: at.cs, amax: at.a * 4, table: colTable + weightCodesTableBytes(cols.length) },
  };
}

/**
 * The buffers of a WeightCodesPlan: the codes and scales are the weights in the GEMMs' format, alive
 * for the whole step (category 'weights'); the column kernels' tile maxima and the tables are workspace.
 */
export function weightCodesBuffers(p: WeightCodesPlan | null): BufferSpec[] {
  if (!p) return [];
  const out: BufferSpec[] = [];
  const put = (key: string, category: 'weights' | 'workspace', bytes: number) => {
    if (bytes > 0) out.push({ key, category, bytes });
  };
  put('wcodes.rows', 'weights', p.bytes.rowCodes);
  put('wcodes.rowScales', 'weights', p.bytes.rowScales);
  put('wcodes.cols', 'weights', p.bytes.colCodes);
  put('wcodes.colScales', 'weights', p.bytes.colScales);
  put('wcodes.amax', 'workspace', p.bytes.amax);
  put('wcodes.table', 'workspace', p.bytes.table);
  return out;
}

/** A model's per-step weight codes: the dispatches that make them and the slice each GEMM binds. */
export class WeightCodes {
  private readonly rowAt = new Map<string, RowCodesEntry>();
  private readonly colAt = new Map<string, ColCodesEntry>();

  constructor(private readonly rt: Runtime, private readonly p: WeightCodesPlan, private readonly b: (key: string) => GPUBuffer) {
    for (const e of p.rows) this.rowAt.set(e.name, e);
    for (const e of p.cols) this.colAt.set(e.name, e);
    if (p.rows.length) rt.write(b('wcodes.table'), rowCodesTable(p.rows), 0);
    if (p.cols.length) rt.write(b('wcodes.table'), colCodesTable(p.cols), p.colTable);
  }

  /** The codes of every entry from `weights`: one dispatch for the rows, two for the columns. */
  dispatches(weights: GPUBuffer): Dispatch[] {
    const { rt, p, b } = this;
    const table = (offset: number, n: number): Binding => ({ buffer: b('wcodes.table'), offset, size: weightCodesTableBytes(n) });
    return [
      ...(p.rows.length ? rowCodes(rt, { label: 'wcodes', x: weights, entries: p.rows, table: table(0, p.rows.length), codes: b('wcodes.rows'), scales: b('wcodes.rowScales') }) : []),
      ...(p.cols.length ? colCodes(rt, {
        label: 'wcodes', x: weights, entries: p.cols, table: table(p.colTable, p.cols.length), codes: b('wcodes.cols'), scales: b('wcodes.colScales'), amax: b('wcodes.amax'),
      }) : []),
    ];
  }

  /** W's codes per output channel (the forward), or undefined where this plan keeps none for `name`. */
  rows(name: string): I8Operand | undefined {
    const e = this.rowAt.get(name);
    return e && this.slices('wcodes.rows', 'wcodes.rowScales', e.q, e.rows * e.rowLength, e.s, e.rows);
  }

  /** Wᵀ's codes per input channel (dX), by parameter name or gateUpKey. */
  cols(name: string): I8Operand | undefined {
    const e = this.colAt.get(name);
    return e && this.slices('wcodes.cols', 'wcodes.colScales', e.q, e.R * e.CN, e.s, e.CN);
  }

  private slices(codes: string, scales: string, q: number, n: number, s: number, ns: number): I8Operand {
    return { codes: { buffer: this.b(codes), offset: q, size: n }, scales: { buffer: this.b(scales), offset: s, size: ns * 4 } };
  }
}
