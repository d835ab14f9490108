/**
 * IEEE half (f16) storage on the GPU (./f16.wgsl's codec in kernels/bf16/half-storage.wgsl, the shader
 * F16_STORAGE_CODE of kernels/matmul-f16/cast.ts, whose castF16Operand takes its vec4 pack), bit for
 * bit ./f16.ref.ts: pack n fp32 values into ⌈n/2⌉ u32 words with pack2x16float and unpack them with
 * unpack2x16float (core WGSL: no shader-f16). The dispatch layout is bf16's (halfStorageDispatches).
 */
import codec from './f16.wgsl?raw';
import segmentsCode from './cast-segments.wgsl?raw';
import { type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { halfStorageDispatches, packBf16, unpackBf16 } from '../bf16/bf16';
import { F16_HALF_WGSL, f16OperandBytes, F16_STORAGE_CODE } from '../matmul-f16/cast';
import { asSlice, bindingBytes, grid2d, requireBytes } from '../launch';
import { wgslPreamble, wgslSection } from '../wgsl';
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

/** One cast of castF16Segments: x's `n` values from float `src` into out's f16 operand elements from `dst`. */
export interface F16CastSegment {
  src: number;
  dst: number;
  n: number;
}

/** Most segments one castF16Segments dispatch takes (its uniform block: 16 KiB, under WebGPU's 64 KiB minimum). */
export const MAX_F16_CAST_SEGMENTS = 1023;

/**
 * Several castF16Operand casts (kernels/matmul-f16/cast.ts) in one dispatch (./cast-segments.wgsl; up
 * to MAX_F16_CAST_SEGMENTS a dispatch): for each segment, out's elements [dst, dst + n) as castF16Operand
 * of x's floats [src, src + n) leaves them, bit for bit, and nothing else of out written (elem 'f16': ⌈n/2⌉ packed
 * words from element dst; 'f32': the twin's n f32). src and dst must be multiples of 4 (vec4 access),
 * the segments' destinations apart. Labelled as the cast (`label[f32→f16]`).
 */
export function castF16Segments(rt: Runtime, o: { label: string; x: Binding; out: Binding; segments: readonly F16CastSegment[]; elem?: 'f16' | 'f32' }): Dispatch[] {
  const twin = (o.elem ?? 'f16') === 'f32';
  const segs = o.segments;
  for (const g of segs) {
    if (![g.src, g.dst, g.n].every((v) => Number.isInteger(v) && v >= 0) || g.n < 1 || g.src % 4 || g.dst % 4) {
      throw new Error(`${o.label}: bad cast segment ${JSON.stringify(g)} (src, dst: multiples of 4; n ≥ 1)`);
    }
  }
  const byDst = [...segs].sort((a, b) => a.dst - b.dst);
  byDst.forEach((g, i) => {
    if (i > 0 && byDst[i - 1].dst + byDst[i - 1].n > g.dst) throw new Error(`${o.label}: cast segments ${JSON.stringify(byDst[i - 1])} and ${JSON.stringify(g)} overlap in out`);
  });
  if (asSlice(o.x).buffer === asSlice(o.out).buffer) throw new Error(`${o.label}: x and out must be different buffers`);
  const quads = (n: number) => Math.ceil(n / 4);
  requireBytes(o.label, 'x', o.x, Math.max(0, ...segs.map((g) => (g.src + g.n) * 4)));
  requireBytes(o.label, 'out', o.out, Math.max(0, ...segs.map((g) => f16OperandBytes(g.dst + g.n, twin))));
  // A segment's last quad is loaded and stored as a whole vec4 (its writes stay within the n values' words):
  // the bindings reach whole vec4s where their buffers have them (GpuMemory's sizes are multiples of 16).
  const whole = (name: string, b: Binding, bytes: number): Binding => {
    const s = asSlice(b);
    const offset = s.offset ?? 0;
    const size = Math.max(bindingBytes(b), bytes);
    if (offset + size > s.buffer.size) throw new Error(`${o.label}: ${name}'s buffer ends before the segments' last whole vec4 (${bytes} bytes from ${offset})`);
    return { buffer: s.buffer, offset, size };
  };
  const x = whole('x', o.x, Math.max(0, ...segs.map((g) => (g.src + quads(g.n) * 4) * 4)));
  const out = whole('out', o.out, Math.max(0, ...segs.map((g) => (g.dst + quads(g.n) * 4) * (twin ? 4 : 2))));
  const dispatches: Dispatch[] = [];
  for (let at = 0; at < segs.length; at += MAX_F16_CAST_SEGMENTS) {
    const part = segs.slice(at, at + MAX_F16_CAST_SEGMENTS);
    const table = new Uint32Array(4 + 4 * part.length);
    let groups = 0;
    part.forEach((g, j) => {
      table.set([groups, g.src / 4, g.dst / 4, g.n], 4 + 4 * j);
      groups += Math.ceil(quads(g.n) / 256);
    });
    table.set([part.length, groups]);
    const u = rt.mem.allocUniform(`${o.label}.segments`, table.byteLength);
    rt.write(u, table);
    const entry = twin ? 'twin' : 'words';
    const code = `${F16_HALF_WGSL}\n${codec}\nconst SEGS = ${part.length}u;\n${wgslPreamble(segmentsCode)}${wgslSection(segmentsCode, entry)}`;
    dispatches.push(rt.kernel({ label: `${o.label}[f32→f16]`, code, entryPoint: entry, bindings: [x, out, u], workgroups: grid2d(rt, groups) }));
  }
  return dispatches;
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
