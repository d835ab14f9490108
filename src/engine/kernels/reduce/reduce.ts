/**
 * Global L2 norm of gradients: deterministic two-stage sum of squares (see src/engine/kernels/reduce/reduce.wgsl).
 *
 * N = elements of one buffer; P(N) = its stage-1 partial count (≤ 1024, one per workgroup);
 * S = partials in total (several buffers may write disjoint ranges of one partials buffer, then
 * one finalize turns all of them into sqrt(Σx²)). Partials are workspace: size them with
 * globalNormPartialsBytes.
 */
import body from './reduce.wgsl?raw';
import wgSum from '../../../../shaders/wg-sum.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { requireBytes } from '../launch';

const src = `${wgSum}\n${body}`;

const WG = 256;
/** Enough workgroups to fill a big GPU (132 SMs × several) while keeping stage 2 trivial. */
export const SUMSQ_MAX_PARTIALS = 1024;

/** Stage-1 workgroups (= partials written) for a buffer of n elements; depends on n only. */
export function sumSquaresPartialCount(n: number): number {
  return Math.max(1, Math.min(SUMSQ_MAX_PARTIALS, Math.ceil(n / WG)));
}

/** Bytes of the partials workspace for one buffer of n elements, or for several buffers. */
export function globalNormPartialsBytes(n: number | number[]): number {
  const ns = typeof n === 'number' ? [n] : n;
  return 4 * ns.reduce((s, k) => s + sumSquaresPartialCount(k), 0);
}

/** Stage 1: partials[base .. base + P(n)) = sums of squares of disjoint parts of x[0..n). */
export function sumSquaresPartials(rt: Runtime, o: { label: string; x: Binding; n: number; partials: Binding; base?: number }): Dispatch {
  const P = sumSquaresPartialCount(o.n);
  const base = o.base ?? 0;
  requireBytes(o.label, 'x', o.x, o.n * 4);
  requireBytes(o.label, 'partials', o.partials, (base + P) * 4);
  const u = rt.uniform(`${o.label}.sumsq`, new Uniforms().u32(o.n).u32(base));
  return rt.kernel({ label: `${o.label}.sumsq`, code: src, entryPoint: 'sumsq_partials', constants: { WG }, bindings: [o.x, o.partials, u], workgroups: [P] });
}

/** Stage 2: out[0] = sqrt(Σ partials[0..count)). */
export function normFinalize(rt: Runtime, o: { label: string; partials: Binding; count: number; out: Binding }): Dispatch {
  requireBytes(o.label, 'partials', o.partials, o.count * 4);
  requireBytes(o.label, 'out', o.out, 4);
  const u = rt.uniform(`${o.label}.normFinalize`, new Uniforms().u32(o.count).u32(0));
  return rt.kernel({ label: `${o.label}.normFinalize`, code: src, entryPoint: 'norm_finalize', constants: { WG }, bindings: [o.partials, o.out, u], workgroups: [1] });
}

/** out[0] = sqrt(Σ x[i]²) over x[0..n). */
export function globalNorm(rt: Runtime, o: { label?: string; x: Binding; n: number; partials: Binding; out: Binding }): Dispatch[] {
  const label = o.label ?? 'globalNorm';
  return [
    sumSquaresPartials(rt, { label, x: o.x, n: o.n, partials: o.partials }),
    normFinalize(rt, { label, partials: o.partials, count: sumSquaresPartialCount(o.n), out: o.out }),
  ];
}

/** out[0] = sqrt(Σ over all parts of Σ x²): the norm over gradients held in several buffers. */
export function globalNormMulti(rt: Runtime, o: { label: string; parts: { x: Binding; n: number }[]; partials: Binding; out: Binding }): Dispatch[] {
  const ds: Dispatch[] = [];
  let base = 0;
  o.parts.forEach((part, i) => {
    ds.push(sumSquaresPartials(rt, { label: `${o.label}.${i}`, x: part.x, n: part.n, partials: o.partials, base }));
    base += sumSquaresPartialCount(part.n);
  });
  ds.push(normFinalize(rt, { label: o.label, partials: o.partials, count: base, out: o.out }));
  return ds;
}
