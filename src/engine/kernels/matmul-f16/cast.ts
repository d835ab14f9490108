/**
 * f32 → f16 operand copies for the f16 GEMMs (./matmul-f16.ts reads `array<vec4<f16>>`, two bytes an
 * element): castF16Operand, the one cast. Every value goes through half() (pack2x16float), so no
 * kernel needs shader-f16 and all run (and are tested) on SwiftShader. WGSL leaves pack2x16float of a
 * value outside f16's range indeterminate, so overflow is decided here as IEEE round-to-nearest does
 * it: |x| ≥ 65520 becomes ±Inf (the loss scaler must see it), NaN stays NaN. A standalone pass over
 * the tensor: the weights' copies once per step after the optimizer (several at once:
 * castF16Segments), and the few operands no producer writes in f16 (model/linear-gemms.ts counts
 * them); RMSNorm, SwiGLU, RoPE and attention write theirs through f16OutWgsl.
 */
import f16Codec from '../f16/f16.wgsl?raw';
import segmentsCode from './cast-segments.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { halfStorageCode, halfStorageDispatches } from '../bf16/bf16';
import { asSlice, bindingBytes, grid2d, requireBytes, vec4Elementwise } from '../launch';
import { wgslPreamble, wgslSection } from '../wgsl';

const WG = 256;

/** Where a kernel also writes its output's f16 copy: `out` holds n f16 (f16OperandBytes), f32 storage in the twin (elem 'f32'). */
export interface F16Out {
  out: Binding;
  elem: 'f16' | 'f32';
}

/** `half(v)`: v's f16 bits (round to nearest, overflow and NaN as above), for other kernels that write packed f16. */
export const F16_HALF_WGSL = /* wgsl */ `
fn half(v: f32) -> u32 {
  let b = bitcast<u32>(v);
  let sign = (b >> 16u) & 0x8000u;
  let mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) { return sign | 0x7e00u; } // NaN
  if (mag >= 0x477ff000u) { return sign | 0x7c00u; } // |v| >= 65520 rounds to Inf
  return pack2x16float(vec2<f32>(clamp(v, -65504.0, 65504.0), 0.0)) & 0xffffu;
}
`;

/**
 * WGSL of a producer's f16 output `name` at @binding(binding) (the module also needs F16_HALF_WGSL):
 * `name_store4(i, v)` writes elements 4i..4i+3 (width 4), `name_store2(i, a, b)` elements 2i, 2i+1
 * (width 2). Packed pairs in u32 words (castF16Operand's layout), or in the twin (elem 'f32') each value
 * as the f32 its f16 rounds to (castF16Operand's twin): the same bits as casting the producer's f32 output.
 */
export function f16OutWgsl(name: string, binding: number, width: 2 | 4, elem: 'f16' | 'f32'): string {
  const r = (v: string) => `unpack2x16float(half(${v})).x`;
  const w = (a: string, b: string) => `half(${a}) | (half(${b}) << 16u)`;
  const decl = (t: string) => `@group(0) @binding(${binding}) var<storage, read_write> ${name}: array<${t}>;`;
  if (width === 4) {
    return elem === 'f32'
      ? `${decl('vec4<f32>')}\nfn ${name}_store4(i: u32, v: vec4<f32>) { ${name}[i] = vec4<f32>(${r('v.x')}, ${r('v.y')}, ${r('v.z')}, ${r('v.w')}); }\n`
      : `${decl('vec2<u32>')}\nfn ${name}_store4(i: u32, v: vec4<f32>) { ${name}[i] = vec2<u32>(${w('v.x', 'v.y')}, ${w('v.z', 'v.w')}); }\n`;
  }
  return elem === 'f32'
    ? `${decl('vec2<f32>')}\nfn ${name}_store2(i: u32, a: f32, b: f32) { ${name}[i] = vec2<f32>(${r('a')}, ${r('b')}); }\n`
    : `${decl('u32')}\nfn ${name}_store2(i: u32, a: f32, b: f32) { ${name}[i] = ${w('a', 'b')}; }\n`;
}

/** A producer's f16 output `name` at @binding(binding) with the half() it stores through (f16OutWgsl after F16_HALF_WGSL). */
export const f16OutModule = (name: string, binding: number, width: 2 | 4, elem: 'f16' | 'f32'): string =>
  `${F16_HALF_WGSL}\n${f16OutWgsl(name, binding, width, elem)}`;

/**
 * The IEEE half storage shader (kernels/bf16/half-storage.wgsl with ../f16/f16.wgsl's codec over half()):
 * kernels/f16's packF16/unpackF16, and castF16Operand's vec4 pass (here, so the cast imports nothing of
 * kernels/f16, which imports this file).
 */
export const F16_STORAGE_CODE = halfStorageCode(`${F16_HALF_WGSL}\n${f16Codec}`);

// The scalar pass: two values (one word) per invocation, any n and offset.
const CODE = /* wgsl */ `
struct Params { n: u32, _p0: u32, _p1: u32, _p2: u32 }
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
${F16_HALF_WGSL}

@compute @workgroup_size(${WG})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let w = gid.x + gid.y * nwg.x * ${WG}u;
  let i = 2u * w;
  if (i >= P.n) { return; }
  var hi = 0u;
  if (i + 1u < P.n) { hi = half(x[i + 1u]); }
  out[w] = half(x[i]) | (hi << 16u);
}
`;

// The f32 twin (elem 'f32'): the same rounding, each value stored as the f32 it rounds to (what the
// GEMMs' f32 twins read: tests of the model's f16 branch on a device without shader-f16).
const TWIN = CODE.replace('var<storage, read_write> out: array<u32>;', 'var<storage, read_write> out: array<f32>;')
  .replace('out[w] = half(x[i]) | (hi << 16u);', `out[i] = unpack2x16float(half(x[i])).x;
  if (i + 1u < P.n) { out[i + 1u] = unpack2x16float(hi).x; }`);
if (TWIN === CODE || TWIN.includes('out[w]')) throw new Error('cast.ts: the f32 twin no longer derives from the kernel');

/** Bytes of n f16 values packed two to a u32 word. */
export const f16Bytes = (n: number): number => Math.ceil(n / 2) * 4;

/** Bytes of n f16 operands as stored: packed f16, or one f32 each in the twin (elem 'f32'). */
export const f16OperandBytes = (n: number, twin: boolean): number => (twin ? n * 4 : f16Bytes(n));

/**
 * out[0 .. ⌈n/2⌉ words) = x[0 .. n) as f16 (element i in bits 16·(i % 2) of word i/2; an odd n's last high
 * half is 0), or in the twin (elem 'f32') each value as the f32 its f16 rounds to. One dispatch, labelled
 * `label[f32→f16]`. Packed with n % 4 == 0 and 16-byte aligned bindings (every operand in the model), the
 * storage pack's vec4 pass: the same half() per value, so the same words, one invocation per 4 values
 * instead of 2 (16-byte loads). Else (the twin, other counts) the scalar pass.
 */
export function castF16Operand(rt: Runtime, o: { label: string; x: Binding; out: Binding; n: number; elem?: 'f16' | 'f32' }): Dispatch {
  if (!Number.isInteger(o.n) || o.n < 1) throw new Error(`${o.label}: invalid element count ${o.n}`);
  requireBytes(o.label, 'x', o.x, o.n * 4);
  const twin = o.elem === 'f32';
  requireBytes(o.label, 'out', o.out, f16OperandBytes(o.n, twin));
  const name = `${o.label}[f32→f16]`;
  if (!twin && vec4Elementwise(o.n, [o.x, o.out])) {
    return halfStorageDispatches(rt, F16_STORAGE_CODE, o.label, o.n, o.x, o.out, 'pack', name)[0];
  }
  const u = rt.uniform(`${o.label}.f16cast`, new Uniforms().u32(o.n).u32(0).u32(0).u32(0));
  return rt.kernel({ label: name, code: twin ? TWIN : CODE, bindings: [o.x, o.out, u], workgroups: grid2d(rt, Math.ceil(Math.ceil(o.n / 2) / WG)) });
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
 * Several castF16Operand casts in one dispatch (./cast-segments.wgsl; up
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
    const code = `${F16_HALF_WGSL}\n${f16Codec}\nconst SEGS = ${part.length}u;\n${wgslPreamble(segmentsCode)}${wgslSection(segmentsCode, entry)}`;
    dispatches.push(rt.kernel({ label: `${o.label}[f32→f16]`, code, entryPoint: entry, bindings: [x, out, u], workgroups: grid2d(rt, groups) }));
  }
  return dispatches;
}
