/**
 * 16-bit float storage on the GPU (./half-storage.wgsl with a format's codec) and bfloat16's, bit for
 * bit ./bf16.ref.ts: pack n fp32 values into ⌈n/2⌉ u32 words (round to nearest even) and unpack them
 * back. Whole quads run on vec4 loads, one per invocation on a 2-D grid (n up to the binding size
 * limit); the last n % 4 values, if any, in a second one-workgroup dispatch.
 */
import codec from './bf16.wgsl?raw';
import skeleton from './half-storage.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { asSlice, grid2d, requireBytes } from '../launch';
import { bf16Words } from './bf16.ref';
import { wgslPreamble, wgslSection } from '../wgsl';

export { bf16Words };

const WG = 256;

function slice(b: Binding, bytes: number): Binding {
  const s = asSlice(b);
  return { buffer: s.buffer, offset: s.offset ?? 0, size: bytes };
}

/** The 16-bit storage shader of a format's codec WGSL (enc, dec2: see half-storage.wgsl). */
export function halfStorageCode(codecWgsl: string): string {
  return `${codecWgsl}\n${skeleton}`;
}

const CODE = halfStorageCode(codec);

/**
 * The pack or unpack dispatches of a 16-bit storage shader `code` (halfStorageCode): sections pack,
 * pack_tail, unpack, unpack_tail over Params { quads, n }. `name`: the whole quads' dispatch's label (default `label.dir`).
 */
export function halfStorageDispatches(rt: Runtime, code: string, label: string, n: number, from: Binding, to: Binding, dir: 'pack' | 'unpack', name = `${label}.${dir}`): Dispatch[] {
  if (!Number.isInteger(n) || n < 0) throw new Error(`${label}: invalid element count ${n}`);
  const [src4, dst4] = dir === 'pack' ? [16, 8] : [8, 16];
  requireBytes(label, dir === 'pack' ? 'x' : 'words', from, dir === 'pack' ? n * 4 : bf16Words(n) * 4);
  requireBytes(label, dir === 'pack' ? 'words' : 'out', to, dir === 'pack' ? bf16Words(n) * 4 : n * 4);
  const quads = Math.floor(n / 4);
  const u = rt.uniform(`${label}.${dir}`, new Uniforms().u32(quads).u32(n).u32(0).u32(0));
  const pre = wgslPreamble(code);
  const out: Dispatch[] = [];
  if (quads > 0) {
    out.push(rt.kernel({
      label: name, code: pre + wgslSection(code, dir), entryPoint: dir,
      bindings: [slice(from, quads * src4), slice(to, quads * dst4), u], workgroups: grid2d(rt, Math.ceil(quads / WG)),
    }));
  }
  if (n % 4) {
    const tail = `${dir}_tail`;
    out.push(rt.kernel({ label: `${label}.${tail}`, code: pre + wgslSection(code, tail), entryPoint: tail, bindings: [from, to, u], workgroups: [1] }));
  }
  return out;
}

/** Dispatches that store x[0..n) (fp32) as bf16 in `words` (⌈n/2⌉ u32). */
export function packBf16(rt: Runtime, o: { label: string; x: Binding; words: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, CODE, o.label, o.n, o.x, o.words, 'pack');
}

/** Dispatches that expand n bf16 values from `words` into fp32 `out`. */
export function unpackBf16(rt: Runtime, o: { label: string; words: Binding; out: Binding; n: number }): Dispatch[] {
  return halfStorageDispatches(rt, CODE, o.label, o.n, o.words, o.out, 'unpack');
}
