/**
 * Elementwise fp32 ops over flat arrays of any length (N elements; grids above 65535 workgroups go
 * 2-D). Each call builds its Dispatch once; N and alpha/value live in a small uniform.
 *
 *   add:   out = a + b          axpy:  out += alpha · a        copy:  out = a
 *   fill:  out = value          scale: out *= alpha
 */
import src from './elementwise.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, requireBytes, vec4Elementwise } from '../launch';

const WG = 256;

/** `n` elements of the entry point (copy4: 16-byte words); the dispatch is labelled `label.op`. */
function launch(rt: Runtime, label: string, entryPoint: string, n: number, alpha: number, bindings: (u: GPUBuffer) => Binding[], op = entryPoint): Dispatch {
  if (!Number.isInteger(n) || n < 0) throw new Error(`${label}: invalid element count ${n}`);
  const u = rt.uniform(`${label}.${op}`, new Uniforms().u32(n).f32(alpha).u32(0).u32(0));
  return rt.kernel({ label: `${label}.${op}`, code: src, entryPoint, bindings: bindings(u), workgroups: grid2d(rt, Math.ceil(n / WG)) });
}

/** out[i] = a[i] + b[i] for i < n (out may not alias a or b: WebGPU forbids read + read_write views). */
export function add(rt: Runtime, o: { label: string; a: Binding; b: Binding; out: Binding; n: number }): Dispatch {
  for (const [k, v] of [['a', o.a], ['b', o.b], ['out', o.out]] as const) requireBytes(o.label, k, v, o.n * 4);
  if (vec4Elementwise(o.n, [o.a, o.b, o.out])) return launch(rt, o.label, 'add4', o.n / 4, 0, (u) => [o.a, o.out, u, o.b], 'add');
  return launch(rt, o.label, 'add', o.n, 0, (u) => [o.a, o.out, u, o.b]);
}

/** out[i] += alpha · x[i]. */
export function axpy(rt: Runtime, o: { label: string; x: Binding; out: Binding; alpha: number; n: number }): Dispatch {
  requireBytes(o.label, 'x', o.x, o.n * 4);
  requireBytes(o.label, 'out', o.out, o.n * 4);
  if (vec4Elementwise(o.n, [o.x, o.out])) return launch(rt, o.label, 'axpy4', o.n / 4, o.alpha, (u) => [o.x, o.out, u], 'axpy');
  return launch(rt, o.label, 'axpy', o.n, o.alpha, (u) => [o.x, o.out, u]);
}

/** dst[i] = src[i] (a kernel rather than copyBufferToBuffer so it can sit inside a compute pass). */
export function copy(rt: Runtime, o: { label: string; src: Binding; dst: Binding; n: number }): Dispatch {
  requireBytes(o.label, 'src', o.src, o.n * 4);
  requireBytes(o.label, 'dst', o.dst, o.n * 4);
  // 16-byte words where the count and both offsets allow (the model's residual copies): a quarter of the invocations.
  if (vec4Elementwise(o.n, [o.src, o.dst])) return launch(rt, o.label, 'copy4', o.n / 4, 0, (u) => [o.src, o.dst, u], 'copy');
  return launch(rt, o.label, 'copy', o.n, 0, (u) => [o.src, o.dst, u]);
}

/** out[i] = value (zeroing gradients: value 0). */
export function fill(rt: Runtime, o: { label: string; out: Binding; value: number; n: number }): Dispatch {
  requireBytes(o.label, 'out', o.out, o.n * 4);
  return launch(rt, o.label, 'fill', o.n, o.value, (u) => [o.out, u]);
}

/** out[i] *= alpha, in place. */
export function scale(rt: Runtime, o: { label: string; out: Binding; alpha: number; n: number }): Dispatch {
  requireBytes(o.label, 'out', o.out, o.n * 4);
  return launch(rt, o.label, 'scale', o.n, o.alpha, (u) => [o.out, u]);
}
