/**
 * Rotary position embedding on the GPU (HF LLaMA convention; see rope.ref.ts for the maths).
 *
 * Shapes: B batch, T sequence length, H heads (nHeads), D head dim (even), P = D/2.
 * x, y: [B, T, H, D] fp32; table: cos [T, P] then sin [T, P] (build it once with ropeTablePacked or
 * uploadRopeTable and charge it to 'workspace').
 */
import ropeFile from './rope.wgsl?raw';
import ropeQ8Body from './q8.wgsl?raw';
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, requireBytes, sameBinding } from '../launch';
import { castF16Operand, F16_HALF_WGSL, f16OperandBytes, f16OutWgsl } from '../matmul-f16/cast';
import { wgslIf, wgslPreamble, wgslSection } from '../wgsl';
import type { F16Out } from '../matmul-f16/cast';
import { ropeTablePacked } from './rope.ref';

export { ropeTable, ropeTablePacked } from './rope.ref';

const ropeSrc = wgslPreamble(ropeFile);

export interface RopeArgs {
  label: string;
  x: Binding;
  /** May be the same binding as x (same buffer, offset and size): then the rotation runs in place. */
  y: Binding;
  /** cos then sin, [2, T, D/2] (or [2, tableT, D/2] with tableT >= T, see below). */
  table: Binding;
  B: number;
  T: number;
  nHeads: number;
  D: number;
  /** Rotate by −angle: the backward (dx from dy). */
  inverse?: boolean;
  /** Rows of the table when it was built for a longer maximum length than T (default T). */
  tableT?: number;
}

/** Uploads the packed cos/sin table for (T, D, theta), charged to workspace. */
export function uploadRopeTable(rt: Runtime, label: string, T: number, D: number, theta: number): GPUBuffer {
  return rt.upload('workspace', `${label}.ropeTable`, ropeTablePacked(T, D, theta));
}

/**
 * y = rope(x) (or its inverse). In place when y is x; a partially overlapping x/y is rejected by
 * WebGPU's aliasing rules at bind time.
 */
export function rope(rt: Runtime, a: RopeArgs): Dispatch {
  const { B, T, nHeads, D } = a;
  if (D % 2 !== 0) throw new Error(`${a.label}: rope head dim ${D} must be even`);
  const P = D / 2;
  const tableT = a.tableT ?? T;
  if (tableT < T) throw new Error(`${a.label}: rope table has ${tableT} rows < T = ${T}`);
  const n = B * T * nHeads * P;
  const groups = Math.ceil(n / 256);
  const gx = Math.max(1, Math.min(groups, 32768));
  const gy = Math.ceil(groups / gx);
  const u = rt.uniform(`${a.label}.rope`, new Uniforms()
    .u32(n).u32(T).u32(nHeads).u32(P).u32(tableT * P).f32(a.inverse ? -1 : 1).u32(gx * 256).u32(0));
  const inPlace = sameBinding(a.x, a.y);
  return rt.kernel({
    label: `${a.label}.rope${a.inverse ? 'Bwd' : ''}`,
    code: ropeSrc,
    entryPoint: inPlace ? 'rope_inplace' : 'rope',
    bindings: inPlace ? [a.x, a.table, u] : [a.x, a.y, a.table, u],
    workgroups: [n === 0 ? 0 : gx, n === 0 ? 1 : gy],
  });
}

/** The rotation that also writes y's f16 copy (packed, or the twin's f32: elem); `y32` false: that copy alone (binding 3). */
const ropeHalfSrc = (elem: 'f16' | 'f32', y32 = true) =>
  `${ropeSrc}\n${F16_HALF_WGSL}\n${f16OutWgsl('h_y', y32 ? 4 : 3, 2, elem)}\n${wgslIf(wgslSection(ropeFile, 'half'), { Y32: y32 })}`;

/**
 * y = rope(x) (or its inverse) and y's f16 copy into `y16` (the backward's dq, dk as the dY operand of
 * f16 GEMMs; the cast's rounding, matmul-f16/cast.ts). One dispatch when the head dim is a multiple
 * of 4 and y is not x; else the plain rotation and the standalone cast.
 */
export function ropeF16(rt: Runtime, a: RopeArgs & { y16: F16Out;
  /** Nothing reads y in fp32: the fused kernel writes y16 only (y is written where the fallback runs). */
  y16Only?: boolean; }): Dispatch[] {
  const { B, T, nHeads, D } = a;
  const n = B * T * nHeads * D;
  requireBytes(a.label, 'y16', a.y16.out, f16OperandBytes(n, a.y16.elem === 'f32'));
  if (D % 4 !== 0 || sameBinding(a.x, a.y) || n === 0) return [rope(rt, a), castF16Operand(rt, { label: a.label, x: a.y, out: a.y16.out, n, elem: a.y16.elem })];
  requireBytes(a.label, 'x', a.x, n * 4);
  requireBytes(a.label, 'y', a.y, n * 4);
  const P = D / 2;
  const tableT = a.tableT ?? T;
  if (tableT < T) throw new Error(`${a.label}: rope table has ${tableT} rows < T = ${T}`);
  const groups = Math.ceil(n / 4 / 256);
  const gx = Math.max(1, Math.min(groups, 32768));
  const gy = Math.ceil(groups / gx);
  const u = rt.uniform(`${a.label}.ropeH`, new Uniforms()
    .u32(n / 2).u32(T).u32(nHeads).u32(P).u32(tableT * P).f32(a.inverse ? -1 : 1).u32(gx * 256).u32(0));
  const only = !!a.y16Only;
  return [rt.kernel({
    label: `${a.label}.rope${a.inverse ? 'Bwd' : ''}H${only ? '16' : ''}`, code: ropeHalfSrc(a.y16.elem, !only), entryPoint: 'rope_h',
    bindings: only ? [a.x, a.table, u, a.y16.out] : [a.x, a.y, a.table, u, a.y16.out], workgroups: [gx, gy],
  })];
}

const ropeQ8Src = `${codecSrc}\n${ropeQ8Body}`;

/** Whether ropeQuantized runs at head dim D: whole vec4s in each half of a row, rows that tile a 256-wide workgroup. */
export const ropeQuantizedFits = (D: number) => D % 8 === 0 && 256 % (D / 4) === 0;

/**
 * y = rope(x) (forward only) and y's INT8 codes per (token, head) row of D values into `codes`
 * (D/4 words a row) and `scales` (one a row): the codes and scale quantizeRef 'row' gives y.
 */
export function ropeQuantized(rt: Runtime, a: Omit<RopeArgs, 'inverse'> & { codes: Binding; scales: Binding }): Dispatch {
  const { B, T, nHeads, D } = a;
  if (!ropeQuantizedFits(D)) throw new Error(`${a.label}: rope with INT8 codes needs D a multiple of 8 and D/4 dividing 256, not D ${D}`);
  const P = D / 2;
  const tableT = a.tableT ?? T;
  if (tableT < T) throw new Error(`${a.label}: rope table has ${tableT} rows < T = ${T}`);
  const rows = B * T * nHeads;
  const [gx, gy] = grid2d(rt, Math.ceil(rows / (256 / (D / 4))));
  const u = rt.uniform(`${a.label}.ropeQ8`, new Uniforms().u32(rows).u32(T).u32(nHeads).u32(P).u32(tableT * P).u32(0).u32(gx).u32(0));
  return rt.kernel({
    label: `${a.label}.ropeQ8`,
    code: ropeQ8Src,
    entryPoint: 'rope_q8',
    constants: { DW: D / 4 },
    bindings: [a.x, a.y, a.table, u, a.codes, a.scales],
    workgroups: [gx, gy],
  });
}
