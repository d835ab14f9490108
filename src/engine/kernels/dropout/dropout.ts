/**
 * Inverted dropout whose mask is a hash of (seed, index) (./dropout.wgsl), so the backward
 * recomputes it instead of storing it: `apply` writes x's dropped copy, `accumulateMasked` adds a
 * gradient through the same mask. One seed per step (setSeed, a 4-byte write) and an on/off switch
 * (setActive: evaluation keeps every value, scale 1). Reference: ./dropout.ref.ts.
 */
import src from './dropout.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { grid2d, requireBytes } from '../launch';
import { dropoutThreshold } from './dropout.ref';

const WG = 256;
const SEED_OFFSET = 4;

export interface DropoutKernels {
  /** out = x ⊙ mask / (1 − p). */
  apply(label: string, x: Binding, out: Binding): Dispatch;
  /** out += g ⊙ mask / (1 − p). */
  accumulateMasked(label: string, g: Binding, out: Binding): Dispatch;
  setSeed(seed: number): void;
  /** false: keep every value unscaled (evaluation); true: drop with probability p. */
  setActive(on: boolean): void;
  /** Frees the parameter block (the uniform buffer every dispatch made here binds). */
  destroy(): void;
}

/** Dropout over n elements with probability p; every dispatch made here shares one seed. */
export function dropoutKernels(rt: Runtime, label: string, n: number, p: number): DropoutKernels {
  if (!(p >= 0 && p < 1)) throw new Error(`${label}: dropout probability ${p} must be in [0, 1)`);
  if (!Number.isInteger(n) || n < 1 || n >= 2 ** 32) throw new Error(`${label}: invalid element count ${n}`);
  const params = (on: boolean, seed: number) => new Uniforms().u32(n).u32(seed).u32(on ? dropoutThreshold(p) : 0).f32(on ? 1 / (1 - p) : 1).bytes();
  const u = rt.uniform(`${label}.dropout`, new Uniforms().u32(n).u32(0).u32(dropoutThreshold(p)).f32(1 / (1 - p)));
  let seed = 0;
  let active = true;
  const dispatch = (entryPoint: string, lab: string, x: Binding, out: Binding) => {
    requireBytes(lab, 'x', x, n * 4);
    requireBytes(lab, 'out', out, n * 4);
    return rt.kernel({ label: `${lab}.${entryPoint}`, code: src, entryPoint, bindings: [x, out, u], workgroups: grid2d(rt, Math.ceil(n / WG)) });
  };
  return {
    apply: (lab, x, out) => dispatch('apply', lab, x, out),
    accumulateMasked: (lab, g, out) => dispatch('accumulate_masked', lab, g, out),
    setSeed: (s) => {
      seed = s >>> 0;
      rt.write(u, Uint32Array.of(seed), SEED_OFFSET);
    },
    setActive: (on) => {
      if (on === active) return;
      active = on;
      rt.write(u, new Uint8Array(params(on, seed)));
    },
    destroy: () => rt.mem.free(u),
  };
}
