/**
 * IEEE half (f16) storage on the GPU (./f16.wgsl), bit for bit ./f16.ref.ts: pack n fp32 values
 * into ⌈n/2⌉ u32 words with pack2x16float and unpack them with unpack2x16float (core WGSL: no
 * shader-f16). The dispatch layout is bf16's (kernels/bf16/bf16.ts halfStorageDispatches).
 */
import src from './f16.wgsl?raw';
import { type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { halfStorageDispatches } from '../bf16/bf16';
import { F16_HALF_WGSL } from '../matmul-f16/cast';
import { f16Words } from './f16.ref';

export { f16Words };

const CODE = `${F16_HALF_WGSL}\n${src}`;

/** Dispatches that store x[0..n) (fp32) as f16 in `words` (⌈n/2⌉ u32). */
export function packF16(rt: Runtime, o: { label: string; x: Binding; words: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, CODE, o.label, o.n, o.x, o.words, 'pack');
}

/** Dispatches that expand n f16 values from `words` into fp32 `out`. */
export function unpackF16(rt: Runtime, o: { label: string; words: Binding; out: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, CODE, o.label, o.n, o.words, o.out, 'unpack');
}
