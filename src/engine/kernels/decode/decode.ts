/**
 * The kernels of one decode token (src/engine/kernels/decode/decode.wgsl; maths in decode.ref.ts): a GEMV for the
 * linears at one row, RoPE at the token's position, and one query's attention over the KV cache.
 *
 * `step` is a 2 × u32 storage buffer [token, pos], written once per token: the position is read on
 * the GPU, so one list of dispatches (and its bind groups) serves every position of the context.
 */
import src from './decode.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, requireBytes } from '../launch';

export { attendRef, gemvRef, ropeAtRef } from './decode.ref';

/** y[n] (+)= Σ_k W[n, k]·x[k] for W [N, K]; `atPos`: into row `pos` of y ([ctx, N], a V cache). */
export function gemv(rt: Runtime, o: {
  label: string; x: Binding; w: Binding; y: Binding; step: Binding; N: number; K: number; accumulate?: boolean; atPos?: boolean;
}): Dispatch {
  requireBytes(o.label, 'x', o.x, o.K * 4);
  requireBytes(o.label, 'w', o.w, o.N * o.K * 4);
  requireBytes(o.label, 'y', o.y, o.N * 4);
  const u = rt.uniform(`${o.label}.gemv`, new Uniforms().u32(o.N).u32(o.K).u32(o.accumulate ? 1 : 0).u32(o.atPos ? 1 : 0));
  return rt.kernel({
    label: `${o.label}.gemv`, code: src, entryPoint: 'gemv',
    bindings: [o.x, o.w, o.step, u, o.y], workgroups: grid2d(rt, Math.ceil(o.N / 4)),
  });
}

/**
 * RoPE of one token x [H, D] at position pos (table: ropeTablePacked for `tableT` ≥ ctx rows) into
 * y's row 0, or with `atPos` into row pos of y ([ctx, H, D], the K cache).
 */
export function ropeAt(rt: Runtime, o: {
  label: string; x: Binding; y: Binding; table: Binding; step: Binding; H: number; D: number; tableT: number; atPos?: boolean;
}): Dispatch {
  if (o.D % 2 !== 0) throw new Error(`${o.label}: rope head dim ${o.D} must be even`);
  const P = o.D / 2;
  requireBytes(o.label, 'x', o.x, o.H * o.D * 4);
  requireBytes(o.label, 'table', o.table, 2 * o.tableT * P * 4);
  const u = rt.uniform(`${o.label}.ropeAt`, new Uniforms().u32(o.H).u32(P).u32(o.tableT * P).u32(o.atPos ? 1 : 0));
  return rt.kernel({
    label: `${o.label}.ropeAt`, code: src, entryPoint: 'rope_at',
    bindings: [o.x, o.table, o.step, u, o.y], workgroups: [Math.ceil((o.H * P) / 64)],
  });
}

/** Largest head dim the attend kernel holds (two output dims per lane of its 128). */
export const ATTEND_MAX_D = 256;

/** o [nH, D] = softmax(q·Kᵀ/√D)·V over cache rows 0..pos (kc, vc: [ctx, nKV, D]); GQA by head groups. */
export function attend(rt: Runtime, o: {
  label: string; q: Binding; kc: Binding; vc: Binding; o: Binding; step: Binding; nH: number; nKV: number; D: number; ctx: number;
}): Dispatch {
  if (o.D > ATTEND_MAX_D) throw new Error(`${o.label}: head dim ${o.D} exceeds the decode attention's ${ATTEND_MAX_D}`);
  if (o.nH % o.nKV !== 0) throw new Error(`${o.label}: nH ${o.nH} not a multiple of nKV ${o.nKV}`);
  requireBytes(o.label, 'q', o.q, o.nH * o.D * 4);
  requireBytes(o.label, 'o', o.o, o.nH * o.D * 4);
  for (const [k, b] of [['kc', o.kc], ['vc', o.vc]] as const) requireBytes(o.label, k, b, o.ctx * o.nKV * o.D * 4);
  const scale = Math.fround(1 / Math.sqrt(o.D));
  const u = rt.uniform(`${o.label}.attend`, new Uniforms().u32(o.nKV).u32(o.nH / o.nKV).u32(o.D).f32(scale));
  return rt.kernel({
    label: `${o.label}.attend`, code: src, entryPoint: 'attend',
    bindings: [o.q, o.kc, o.vc, o.step, u, o.o], workgroups: [o.nH],
  });
}
