/**
 * DiLoCo's outer step on the GPU (src/engine/optim/outer.wgsl; outer.ref.ts is its reference): over one
 * fragment [off, off + n) of the flat parameter buffers, `delta` writes the pseudo-gradient
 * θ_global − θ_local into `d` (what the block quantizer then encodes), and `apply` takes the group's
 * mean from `d` and runs Nesterov momentum on θ_global, then sets or mixes the local weights.
 * w, global, momentum: the flat [total] buffers; d: [≥ n] fp32.
 */
import src from './outer.wgsl?raw';
import { type Dispatch, type Runtime, Uniforms } from '../gpu/runtime';
import { grid2d, requireBytes } from '../kernels/launch';
import type { OuterHyper } from './outer.ref';

export type { OuterHyper } from './outer.ref';

export interface OuterDispatches {
  delta: Dispatch;
  apply: Dispatch;
}

export function outerDispatches(rt: Runtime, o: {
  label: string; w: GPUBuffer; global: GPUBuffer; momentum: GPUBuffer; d: GPUBuffer; off: number; n: number; hyper: OuterHyper;
}): OuterDispatches {
  const { off, n, hyper } = o;
  if (!(Number.isInteger(off) && off >= 0 && Number.isInteger(n) && n >= 0)) throw new Error(`${o.label}: bad range [${off}, +${n})`);
  for (const [k, b] of [['w', o.w], ['global', o.global], ['momentum', o.momentum]] as const) requireBytes(o.label, k, b, (off + n) * 4);
  requireBytes(o.label, 'd', o.d, n * 4);
  const u = rt.uniform(`${o.label}.outer`, new Uniforms().u32(n).u32(off).f32(hyper.lr).f32(hyper.momentum).f32(hyper.alpha).f32(1 - hyper.alpha));
  const bindings = [u, o.w, o.global, o.d];
  const workgroups = grid2d(rt, Math.ceil(n / 256));
  return {
    delta: rt.kernel({ label: `${o.label}.delta`, code: src, entryPoint: 'delta', bindings, workgroups }),
    apply: rt.kernel({ label: `${o.label}.apply`, code: src, entryPoint: 'apply', bindings: [...bindings, o.momentum], workgroups }),
  };
}
