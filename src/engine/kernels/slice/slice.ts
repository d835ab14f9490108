/**
 * Layout copies of row-major f32 matrices. Column slicing, for simulating tensor parallelism: a
 * rank's shard is a block of columns [c0, c0 + W) of an [R, C] matrix. And the transpose, which
 * gives the forward GEMMs their weights k-major (src/engine/kernels/slice/transpose.wgsl says why).
 * Legend: R = rows, C = columns of the full matrix, W = block width, c0 = first column.
 *
 *   gatherColumns:  dst[r, j]       = src[r, c0 + j]      (dst is [R, W])
 *   scatterColumns: dst[r, c0 + j]  = src[r, j]           (or +=; src is [R, W], dst is [R, C])
 *
 * One pipeline serves both (src/engine/kernels/slice/slice.wgsl, strides and offsets in a uniform). src and dst must
 * be different buffers (WebGPU forbids read-only and writable storage views of one buffer in a
 * dispatch); either may be a {buffer, offset, size} slice.
 */
import src from './slice.wgsl?raw';
import transposeSrc from './transpose.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { asSlice, grid2d, requireBytes } from '../launch';

const WG = 256;

export interface ColumnBlock {
  label: string;
  src: Binding;
  dst: Binding;
  rows: number;
  /** Columns of the full matrix. */
  cols: number;
  /** First column of the block. */
  c0: number;
  width: number;
}

/**
 * What every layout copy checks: its sizes are integers of at least `min`, the [rows, cols] matrix
 * is u32-indexable, and src and dst are different buffers.
 */
function checkCopy(label: string, ints: Record<string, number>, min: 0 | 1, rows: number, cols: number, srcB: Binding, dstB: Binding): void {
  for (const [k, v] of Object.entries(ints)) {
    if (!Number.isInteger(v) || v < min) throw new Error(`${label}: ${k} must be a ${min ? 'positive' : 'non-negative'} integer (got ${v})`);
  }
  if (rows * cols >= 2 ** 32) throw new Error(`${label}: ${rows}x${cols} exceeds u32 indexing`);
  if (asSlice(srcB).buffer === asSlice(dstB).buffer) throw new Error(`${label}: src and dst must be different buffers`);
}

function check(o: ColumnBlock): void {
  checkCopy(o.label, { rows: o.rows, cols: o.cols, c0: o.c0, width: o.width }, 0, o.rows, o.cols, o.src, o.dst);
  if (o.c0 + o.width > o.cols) throw new Error(`${o.label}: columns [${o.c0}, ${o.c0 + o.width}) exceed ${o.cols}`);
}

function block(rt: Runtime, label: string, o: ColumnBlock, sa: number, ca: number, sb: number, cb: number, acc: boolean): Dispatch {
  const u = rt.uniform(label, new Uniforms().u32(o.rows).u32(o.width).u32(sa).u32(ca).u32(sb).u32(cb).u32(acc ? 1 : 0).u32(0));
  return rt.kernel({
    label,
    code: src,
    entryPoint: 'copy_block',
    bindings: [u, o.src, o.dst],
    workgroups: grid2d(rt, Math.ceil((o.rows * o.width) / WG)),
  });
}

/** dst[r, j] = src[r, c0 + j] for r < rows, j < width: src [rows, cols] → dst [rows, width]. */
export function gatherColumns(rt: Runtime, o: ColumnBlock): Dispatch {
  check(o);
  requireBytes(o.label, 'src', o.src, o.rows * o.cols * 4);
  requireBytes(o.label, 'dst', o.dst, o.rows * o.width * 4);
  return block(rt, `${o.label}.gather`, o, o.cols, o.c0, o.width, 0, false);
}

/** dst[r, c0 + j] (+)= src[r, j]: src [rows, width] → columns c0.. of dst [rows, cols]. */
export function scatterColumns(rt: Runtime, o: ColumnBlock & { accumulate?: boolean }): Dispatch {
  check(o);
  requireBytes(o.label, 'src', o.src, o.rows * o.width * 4);
  requireBytes(o.label, 'dst', o.dst, o.rows * o.cols * 4);
  return block(rt, `${o.label}.scatter`, o, o.width, 0, o.cols, o.c0, o.accumulate ?? false);
}

export interface Transpose {
  label: string;
  /** [rows, cols] */
  src: Binding;
  /** [cols, rows] */
  dst: Binding;
  rows: number;
  cols: number;
}

const TILE = 32;

/** dst[c, r] = src[r, c]: src [rows, cols] → dst [cols, rows]. */
export function transposeMatrix(rt: Runtime, o: Transpose): Dispatch {
  checkCopy(o.label, { rows: o.rows, cols: o.cols }, 1, o.rows, o.cols, o.src, o.dst);
  requireBytes(o.label, 'src', o.src, o.rows * o.cols * 4);
  requireBytes(o.label, 'dst', o.dst, o.rows * o.cols * 4);
  const tilesX = Math.ceil(o.cols / TILE);
  const u = rt.uniform(o.label, new Uniforms().u32(o.rows).u32(o.cols).u32(tilesX).u32(0));
  return rt.kernel({
    label: o.label,
    code: transposeSrc,
    entryPoint: 'transpose',
    bindings: [u, o.src, o.dst],
    workgroups: grid2d(rt, tilesX * Math.ceil(o.rows / TILE)),
  });
}
