/**
 * IEEE half (f16) storage on the GPU (./f16.wgsl's codec in kernels/bf16/half-storage.wgsl, the shader
 * F16_STORAGE_CODE of kernels/matmul-f16/cast.ts, whose castF16Operand takes its vec4 pack), bit for
 * bit ./f16.ref.ts: pack n fp32 values into ⌈n/2⌉ u32 words with pack2x16float and unpack them with
 * unpack2x16float (core WGSL: no shader-f16). The dispatch layout is bf16's (halfStorageDispatches).
 */
import { type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { halfStorageDispatches, packBf16, unpackBf16 } from '../bf16/bf16';
import { F16_STORAGE_CODE } from '../matmul-f16/cast';
import { f16Words } from './f16.ref';

export { f16Words };

/** Dispatches that store x[0..n) (fp32) as f16 in `words` (⌈n/2⌉ u32). */
export function packF16(rt: Runtime, o: { label: string; x: Binding; words: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, F16_STORAGE_CODE, o.label, o.n, o.x, o.words, 'pack');
}

/** Dispatches that expand n f16 values from `words` into fp32 `out`. */
export function unpackF16(rt: Runtime, o: { label: string; words: Binding; out: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, F16_STORAGE_CODE, o.label, o.n, o.words, o.out, 'unpack');
}

/** The 16-bit float storage formats (scheme HALF_FORMATS) and their kernels. */
export type HalfStorageFormat = 'bf16' | 'f16';

/** Dispatches that store x[0..n) (fp32) as `format` in `words`. */
export function packHalf(rt: Runtime, format: HalfStorageFormat, o: { label: string; x: Binding; words: Binding; n: number }): Dispatch[] {
  return format === 'f16' ? packF16(rt, o) : packBf16(rt, o);
}

/** Dispatches that expand n `format` values from `words` into fp32 `out`. */
export function unpackHalf(rt: Runtime, format: HalfStorageFormat, o: { label: string; words: Binding; out: Binding; n: number }): Dispatch[] {
  return format === 'f16' ? unpackF16(rt, o) : unpackBf16(rt, o);
}

/**
 * Dispatches that expand rows [r0, r0 + rows) of a stored [N, width] `format` tensor into `out`
 * (rows · width fp32). The words' offset must be 256-byte aligned (model/plan.ts storedRowsAligned).
 */
export function unpackHalfRows(rt: Runtime, format: HalfStorageFormat, o: { label: string; words: GPUBuffer; width: number; r0: number; rows: number; out: Binding }): Dispatch[] {
  const words = { buffer: o.words, offset: f16Words(o.r0 * o.width) * 4, size: f16Words(o.rows * o.width) * 4 };
  return unpackHalf(rt, format, { label: o.label, words, out: o.out, n: o.rows * o.width });
}
