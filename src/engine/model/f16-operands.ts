/**
 * The f16 operand copies of a model whose linear GEMMs run f16 (plan.f16 with an f16 path): the
 * linear weights' f16 copy `f16.w` (made from the fp32 master weights at the start of each forward,
 * so after every optimizer step, at init and after a checkpoint load alike), and two activation
 * scratches, `f16.a` (X of a forward GEMM, dY of a dX or dW GEMM: written by their producers, side by
 * side where several live at once, `slots`) and `f16.x` (X of a dW GEMM).
 * Each weight's slot starts at a 256-byte boundary (a storage binding's offset alignment); the fp32
 * layout's 64-float alignment is only 128 bytes in f16.
 */
import { f16AttnInputElems } from '../kernels/attention/f16/code';
import type { F16AttnBwdInputs } from '../kernels/attention/f16/attention-f16';
import { type F16Out, f16OperandBytes } from '../kernels/matmul-f16/cast';
import type { F16GemmPath, LayerF16Paths } from './compute-plan';
import type { ModelDims } from './dims';
import type { ParamLayout } from './params';

export interface F16Operands {
  /** Per linear weight name: its f16 copy's byte offset in `f16.w` and its element count. */
  weights: Map<string, { offset: number; n: number }>;
  weightBytes: number;
  /** Bytes of `f16.a`: N × the widest layer input, or the backward's dY slots side by side where wider. */
  actBytes: number;
  /** Bytes of `f16.x` (when `dw`): N × the widest layer input. */
  xBytes: number;
  /**
   * Byte offsets in `f16.a` of the backward's dY copies that live at once (dgate and dup for the MLP's
   * four GEMMs, dq, dk, dv for q/k/v's six); every other copy starts at 0.
   */
  slots: { dup: number; dk: number; dv: number };
  /** Some dW GEMM runs f16 (it needs `f16.x`). */
  dw: boolean;
}

/** Whether a GEMM's f16 path runs f16 (a path resolved to fp32 does not). */
export const runsF16 = (p: F16GemmPath | null | undefined): boolean => !!p && p !== 'fp32';

/**
 * The f16 copies a plan's f16 GEMMs need, or null where none runs f16. `twin`: the f32 twin's copies
 * (f32 storage holding f16 values: RunPlan.f16Twin), 4 bytes an element.
 */
export function f16Operands(layers: readonly LayerF16Paths[] | undefined, layout: ParamLayout, d: ModelDims, twin = false, training = true): F16Operands | null {
  const bytes = (n: number) => f16OperandBytes(n, twin);
  if (!layers?.some((p) => runsF16(p.forward) || runsF16(p.dx) || runsF16(p.dw))) return null;
  const weights = new Map<string, { offset: number; n: number }>();
  let at = 0;
  for (const p of layers) {
    if (!runsF16(p.forward) && !runsF16(p.dx)) continue;
    for (const v of layout.views) {
      if (!v.name.startsWith(`model.layers.${p.layer}.`) || v.shape.length !== 2) continue;
      weights.set(v.name, { offset: at, n: v.size });
      at += Math.ceil(bytes(v.size) / 256) * 256;
    }
  }
  const widest = bytes(d.N * Math.max(d.C, d.F, d.QC, d.KVC));
  const al = (b: number) => Math.ceil(b / 256) * 256; // a storage binding's offset alignment
  const slots = { dup: al(bytes(d.N * d.F)), dk: al(bytes(d.N * d.QC)), dv: al(bytes(d.N * d.QC)) + al(bytes(d.N * d.KVC)) };
  const backward = training && layers.some((p) => runsF16(p.dx) || runsF16(p.dw));
  const actBytes = backward ? Math.max(widest, slots.dup + bytes(d.N * d.F), slots.dv + bytes(d.N * d.KVC)) : widest;
  return { weights, weightBytes: Math.max(at, 4), actBytes, xBytes: widest, slots, dw: layers.some((p) => runsF16(p.dw)) };
}

/**
 * The f16 attention's inputs in `f16.qkv` (a workspace, where some layer runs f16 attention): q's, k's
 * and v's f16 copies (the forward: RoPE writes q's and k's, a cast v's; the backward casts q, k, v and
 * dO, `backward`: dO's slot too), read by the kernels' matrix loads. Each slot starts at a 256-byte
 * boundary; its binding reaches f16AttnInputElems past its start (the last blocks' loads read a few
 * rows past the tensor: the next slot's values or zeros, finite either way).
 */
export function f16AttnInputSlots(d: ModelDims, twin = false, backward = false) {
  const bytes = (n: number) => f16OperandBytes(n, twin);
  const al = (b: number) => Math.ceil(b / 256) * 256;
  const slot = (offset: number, width: number) => ({ offset, n: d.N * width, size: bytes(f16AttnInputElems(d.N, width)) });
  const q = slot(0, d.QC);
  const k = slot(al(bytes(q.n)), d.KVC);
  const v = slot(k.offset + al(bytes(k.n)), d.KVC);
  const dO = backward ? slot(v.offset + al(bytes(v.n)), d.QC) : null;
  return { q, k, v, dO, bytes: Math.max(...[q, k, v, dO].map((s) => (s ? s.offset + s.size : 0))) };
}

/** The slots of f16AttnInputSlots in `buffer`: the kernels' (padded) bindings, and the producers' exact outputs. */
export function f16AttnInputBindings(buffer: GPUBuffer, d: ModelDims, twin: boolean, backward: boolean): { in: F16AttnBwdInputs; out: Record<'q' | 'k' | 'v' | 'dO', F16Out> } {
  const slots = f16AttnInputSlots(d, twin, backward);
  const elem = twin ? 'f32' : 'f16';
  const bind = (s: { offset: number; size: number } | null) => ({ buffer, offset: s?.offset ?? 0, size: s?.size ?? 0 });
  const out = (s: { offset: number; n: number } | null): F16Out => ({ out: { buffer, offset: s?.offset ?? 0, size: f16OperandBytes(s?.n ?? 0, twin) }, elem });
  return {
    in: { q: bind(slots.q), k: bind(slots.k), v: bind(slots.v), dO: bind(slots.dO), elem },
    out: { q: out(slots.q), k: out(slots.k), v: out(slots.v), dO: out(slots.dO) },
  };
}
