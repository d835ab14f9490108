/**
 * The f16 operand copies of a model whose linear GEMMs run f16 (plan.f16 with an f16 path): the
 * linear weights' f16 copy `f16.w` (made from the fp32 master weights at the start of each forward,
 * so after every optimizer step, at init and after a checkpoint load alike; in a lean plan one weight
 * at a time, right before each GEMM that reads it: f16Lean), and two activation
 * scratches, `f16.a` (X of a forward GEMM, dY of a dX or dW GEMM: written by their producers, side by
 * side where several live at once, `slots`) and `f16.x` (X of a dW GEMM).
 * Each weight's slot starts at a 256-byte boundary (a storage binding's offset alignment); the fp32
 * layout's 64-float alignment is only 128 bytes in f16.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { f16AttnInputElems } from '../kernels/attention/f16/code';
import type { F16AttnBwdInputs } from '../kernels/attention/f16/attention-f16';
import { copy } from '../kernels/elementwise/elementwise';
import { unpackF16 } from '../kernels/f16/f16';
import { castF16Operand, type F16Out, f16OperandBytes } from '../kernels/matmul-f16/cast';
import type { F16GemmPath, LayerF16Paths } from './compute-plan';
import type { ModelDims } from './dims';
import type { ParamLayout } from './params';
import { type ActivationStorage, isHalf, type LayerSavedKey } from './plan';

export interface F16Operands {
  /** Per linear weight name: its f16 copy's byte offset in `f16.w` and its element count (all at 0 where `perGemm`). */
  weights: Map<string, { offset: number; n: number }>;
  weightBytes: number;
  /**
   * Each f16 GEMM casts its weight into `f16.w` from 0 just before it runs (forward and dX alike), so
   * f16.w holds one weight instead of all (RunPlan.f16Lean): the same f16 values, cast twice a step.
   */
  perGemm: boolean;
  /** Bytes of `f16.a`: N × the widest layer input, or the backward's dY slots side by side where wider. */
  actBytes: number;
  /** Bytes of `f16.x` (when `dw`): N × the widest layer input. */
  xBytes: number;
  /**
   * Byte offsets in `f16.a` of the backward's dY copies that live at once (dgate and dup for the MLP's
   * four GEMMs, dq, dk, dv for q/k/v's six); every other copy starts at 0.
   */
  slots: { dup: number; dk: number; dv: number };
  /** Some f16 dW GEMM casts its X into `f16.x` (an X saved as an f16 cell is read from there: f16Cells). */
  dw: boolean;
}

/** The saved tensors that are an f16 GEMM's X (forward, and the dW GEMM's): q/k/v's, o_proj's, gate/up's, down's inputs. */
export const F16_GEMM_X = ['h1', 'o', 'h2', 'act'] as const;
/** The saved tensors the f16 attention reads as f16 (forward and backward). */
export const F16_ATTN_X = ['q', 'k', 'v'] as const;

/**
 * Per layer, the saved tensors stored f16 that are also f16 operands (RunPlan.f16Cells): the cell is
 * the operand copy itself, so its producer writes it once (RMSNorm, SwiGLU, RoPE, the attention's o16;
 * else one cast: v, and o under INT8 scores) and the GEMMs and the attention read it from there (no
 * pack, no unpack-then-cast, no f16.x / f16.qkv copy). In the operand layout (f16OperandBytes: the twin's
 * f32 elements); q, k, v padded as the f16 attention binds them (f16AttnInputElems). Only where some
 * consumer runs f16: the X of a layer whose forward or dW GEMMs do, q/k/v (all three) of an f16 attention.
 */
export function f16Cells(saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[], layers: readonly LayerF16Paths[] | undefined, training: boolean,
  /** Per layer: INT8 attention scores, which run in place of the f16 attention (the model's order). */
  qkInt8: readonly boolean[]): Set<LayerSavedKey>[] {
  return saved.map((st, l) => {
    const p = layers?.[l];
    const out = new Set<LayerSavedKey>();
    if (!p || !training) return out;
    const f16 = (k: LayerSavedKey) => st[k]?.format === 'f16';
    if (runsF16(p.forward) || runsF16(p.dw)) for (const k of F16_GEMM_X) if (f16(k)) out.add(k);
    if (p.attention === 'f16-tensor-core' && !qkInt8[l] && F16_ATTN_X.every(f16)) for (const k of F16_ATTN_X) out.add(k);
    return out;
  });
}

/**
 * Live copies of f16 cells that need no buffer of their own (RunPlan.f16Live), by key, where every layer
 * that stores the tensor keeps it as an f16 cell. q, k, v where each such layer also runs the f16
 * attention both ways: nothing reads them in fp32 but their cells' writers (RoPE, v's cast) right after
 * RoPE and v_proj write them, so they go to backward scratch dead in the forward (dres, dk, dv). o, which
 * the attention backward reads in fp32: qRaw, free in the forward from RoPE's read of it until the next
 * layer's input is written, and in the backward from o's load until rope_q.bwd writes it.
 */
export function f16LiveAlias(d: ModelDims, saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[], cells: readonly Set<LayerSavedKey>[],
  layers: readonly LayerF16Paths[] | undefined): Partial<Record<LayerSavedKey, string>> {
  const out: Partial<Record<LayerSavedKey, string>> = {};
  const stored = (k: LayerSavedKey) => cells.map((_, l) => l).filter((l) => saved[l][k]);
  const allCells = (k: LayerSavedKey, also: (l: number) => boolean = () => true) => {
    const ls = stored(k);
    return ls.length > 0 && ls.every((l) => cells[l].has(k) && also(l));
  };
  const bwd = (l: number) => layers?.[l]?.attentionBackward === 'f16-tensor-core';
  if (d.QC <= d.C && allCells('q', bwd)) out.q = 'dres';
  if (allCells('k', bwd)) out.k = 'dk';
  if (allCells('v', bwd)) out.v = 'dv';
  if (allCells('o')) out.o = 'qRaw';
  return out;
}

/** Bytes of layer l's f16 cell `key` of n elements (f16Cells): the operand layout, q/k/v with the f16 attention's pad rows. */
export function f16CellBytes(d: ModelDims, key: LayerSavedKey, n: number, twin: boolean): number {
  const attn = (F16_ATTN_X as readonly string[]).includes(key);
  return f16OperandBytes(attn ? f16AttnInputElems(d.N, n / d.N) : n, twin);
}

/** Whether some layer's f16 attention reads q, k, v from f16.qkv's slots (it has no f16 cells of them). */
export function f16AttnQkvSlots(layers: readonly LayerF16Paths[] | undefined, cells: readonly Set<LayerSavedKey>[]): boolean {
  return !!layers?.some((p) => p.attention === 'f16-tensor-core' && !F16_ATTN_X.every((k) => cells[p.layer]?.has(k)));
}

/**
 * Whether a plan's f16 workspace is lean (RunPlan.f16Lean): where some saved activation is stored below
 * 16 bits the scheme trades compute for memory (agoq-f16), so the f16 GEMMs cast each weight just before
 * they run instead of keeping the weights' f16 copy for the step (F16Operands.perGemm: one weight's copy
 * in place of all, for one more cast of each weight a step, before its dX GEMM), and gate's live copy
 * is f16.a where f16GateInA.
 */
export function f16Lean(saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[]): boolean {
  return saved.some((st) => Object.values(st).some((s) => !!s && !isHalf(s)));
}

/** The producer outputs whose fp32 values may go unwritten (RunPlan.f16Only). */
export type F16OnlyKey = 'h1' | 'h2' | 'q' | 'k' | 'dq' | 'dk';

/**
 * Per layer, the outputs nothing reads in fp32, whose producers write their f16 copy alone (RunPlan.f16Only):
 * h1, h2 (RMSNorm) where the forward GEMMs run f16 and read the f16 cell (the backward unpacks a cell
 * where it needs fp32); q, k (RoPE) where the cell is the attention's operand and the live copy backward
 * scratch (f16LiveAlias: every layer's f16 attention reads the cells both ways); dq, dk (RoPE's backward)
 * where q_proj's and k_proj's dX and dW GEMMs run f16 (`frozen`: a LoRA base runs no dW) and no LoRA adapter
 * on q or k reads them (`dqFp32`: an adapter's dY is fp32). In a `plain` training plan only (no TP; no
 * checkpointing re-run; LoRA adapters only where they read their inputs' f16 cells: no dropout).
 */
export function f16OnlyOutputs(layers: readonly LayerF16Paths[] | undefined, cells: readonly Set<LayerSavedKey>[],
  live: Partial<Record<LayerSavedKey, string>>, plain: boolean, dqFp32: readonly boolean[] = [], frozen = false): Set<F16OnlyKey>[] {
  return cells.map((c, l) => {
    const p = layers?.[l];
    const out = new Set<F16OnlyKey>();
    if (!plain || !p) return out;
    if (runsF16(p.forward)) for (const k of ['h1', 'h2'] as const) if (c.has(k)) out.add(k);
    for (const k of ['q', 'k'] as const) if (c.has(k) && live[k]) out.add(k);
    if (runsF16(p.dx) && (runsF16(p.dw) || frozen) && !dqFp32[l]) out.add('dq').add('dk');
    return out;
  });
}

/**
 * Per layer, whether the SwiGLU reads and writes gate's and up's f16 storage itself (RunPlan.swigluHalf;
 * kernels/swiglu swigluForwardStored, swigluBackwardStored): both stored f16, the layer's forward, dX and
 * dW GEMMs f16 (`frozen`: a LoRA base runs no dW) and h (act) an f16 cell, so nothing reads h in fp32 — in a
 * `plain` training plan (no TP exchanges; no checkpointing re-run; LoRA adapters only where they read act's
 * cell: no dropout) without gate/up's INT8 dX over K = 2F (gateUpDx). Where gate's or up's adapter reads dgate and dup in fp32 the
 * backward writes them too (f16SwigluBwdStored).
 */
export function f16SwigluStored(saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[], layers: readonly LayerF16Paths[] | undefined,
  cells: readonly Set<LayerSavedKey>[], gateUpDx: readonly boolean[], plain: boolean, frozen = false): boolean[] {
  return gateUpDx.map((fused, l) => {
    const p = layers?.[l];
    return plain && !fused && !!p && runsF16(p.forward) && runsF16(p.dx) && (runsF16(p.dw) || frozen) && cells[l].has('act')
      && saved[l].gate?.format === 'f16' && saved[l].up?.format === 'f16';
  });
}

/**
 * Per layer, whether the SwiGLU backward reads gate's and up's f16 storage whole yet still writes dgate and
 * dup in fp32 (RunPlan.swigluBwdHalf; swigluBackwardStored with dgate): where something reads them in fp32 —
 * gate's or up's LoRA adapter (`dyFp32`, also beside the f16-only forward: `direct`, f16SwigluStored), an fp32
 * dX or dW beside an f16 one (the f16-only one does not apply). Gate and up stored f16, an f16 GEMM reading
 * dgate's and dup's copies (dX or dW f16), gate's live copy its own (`gateInA` false: f16GateInA) and gate/up's
 * dX not one INT8 GEMM (gateUpDx).
 */
export function f16SwigluBwdStored(saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[], layers: readonly LayerF16Paths[] | undefined,
  gateUpDx: readonly boolean[], direct: readonly boolean[], gateInA: boolean, training: boolean, dyFp32: readonly boolean[] = []): boolean[] {
  return gateUpDx.map((fused, l) => {
    const p = layers?.[l];
    return training && !fused && (!direct[l] || !!dyFp32[l]) && !gateInA && !!p && (runsF16(p.dx) || runsF16(p.dw))
      && saved[l].gate?.format === 'f16' && saved[l].up?.format === 'f16';
  });
}

/**
 * Whether gate's fp32 live copy can be `f16.a` (RunPlan.f16Live.gate) in a lean plan (f16Lean): every
 * layer stores gate and up (so the SwiGLU backward runs in blocks of `swigluRows`) and runs its forward,
 * dX and dW GEMMs f16. In the forward gate lives in f16.a from gate_proj to the SwiGLU while the X copies
 * go to f16.x (LinearGemms.xKey); in the backward no [N, F] copy of gate exists: each block's gate rows
 * are dequantized into `dh` (free from the previous norm's backward to h2's load, swigluRows·F ≤ N·C),
 * and dgate's fp32 rows, which only its f16 copy's writer reads (the f16 GEMMs read that copy), stay
 * there. Not with checkpointing, tensor parallelism, LoRA (the adapters read dgate fp32) or gate/up's
 * INT8 dX over K = 2F; f16.x must exist (some dW GEMM's X is not an f16 cell) to take the X copies.
 * gate's storage is up's (one saved kind, swiglu), so swigluRows' alignment holds for its rows too.
 */
export function f16GateInA(d: ModelDims, saved: readonly Partial<Record<LayerSavedKey, ActivationStorage>>[], layers: readonly LayerF16Paths[] | undefined,
  o: { lean: boolean; ops: F16Operands | null; swigluRows: number; plain: boolean }): boolean {
  const all = (p: LayerF16Paths | undefined) => !!p && runsF16(p.forward) && runsF16(p.dx) && runsF16(p.dw);
  return o.lean && o.plain && !!o.ops?.dw && !!layers && o.swigluRows * d.F <= d.N * d.C
    && saved.slice(0, d.L).every((st, l) => !!st.gate && !!st.up && all(layers[l]));
}

/** Whether a GEMM's f16 path runs f16 (a path resolved to fp32 does not). */
export const runsF16 = (p: F16GemmPath | null | undefined): boolean => !!p && p !== 'fp32';

/**
 * The f16 copies a plan's f16 GEMMs need, or null where none runs f16. `twin`: the f32 twin's copies
 * (f32 storage holding f16 values: RunPlan.f16Twin), 4 bytes an element.
 */
export function f16Operands(layers: readonly LayerF16Paths[] | undefined, layout: ParamLayout, d: ModelDims, twin = false, training = true,
  cells: readonly Set<LayerSavedKey>[] = [], perGemm = false): F16Operands | null {
  const bytes = (n: number) => f16OperandBytes(n, twin);
  if (!layers?.some((p) => runsF16(p.forward) || runsF16(p.dx) || runsF16(p.dw))) return null;
  const weights = new Map<string, { offset: number; n: number }>();
  let at = 0;
  for (const p of layers) {
    if (!runsF16(p.forward) && !runsF16(p.dx)) continue;
    for (const v of layout.views) {
      if (!v.name.startsWith(`model.layers.${p.layer}.`) || v.shape.length !== 2) continue;
      weights.set(v.name, { offset: perGemm ? 0 : at, n: v.size });
      at = perGemm ? Math.max(at, bytes(v.size)) : at + Math.ceil(bytes(v.size) / 256) * 256;
    }
  }
  const widest = bytes(d.N * Math.max(d.C, d.F, d.QC, d.KVC));
  const al = (b: number) => Math.ceil(b / 256) * 256; // a storage binding's offset alignment
  const slots = { dup: al(bytes(d.N * d.F)), dk: al(bytes(d.N * d.QC)), dv: al(bytes(d.N * d.QC)) + al(bytes(d.N * d.KVC)) };
  const backward = training && layers.some((p) => runsF16(p.dx) || runsF16(p.dw));
  const actBytes = backward ? Math.max(widest, slots.dup + bytes(d.N * d.F), slots.dv + bytes(d.N * d.KVC)) : widest;
  const dw = layers.some((p) => runsF16(p.dw) && !F16_GEMM_X.every((k) => cells[p.layer]?.has(k)));
  return { weights, weightBytes: Math.max(at, 4), perGemm, actBytes, xBytes: widest, slots, dw };
}

/**
 * The f16 attention's inputs in `f16.qkv` (a workspace, where some layer runs f16 attention): q's, k's
 * and v's f16 copies (the forward: RoPE writes q's and k's, a cast v's; the backward casts q, k, v and
 * dO, `backward`: dO's slot too), read by the kernels' matrix loads. Each slot starts at a 256-byte
 * boundary; its binding reaches f16AttnInputElems past its start (the last blocks' loads read a few
 * rows past the tensor: the next slot's values or zeros, finite either way). `qkv` false: every layer
 * reads q, k, v from its f16 cells (f16AttnQkvSlots), so only dO's slot (at 0) is kept.
 */
export function f16AttnInputSlots(d: ModelDims, twin = false, backward = false, qkv = true) {
  const bytes = (n: number) => f16OperandBytes(n, twin);
  const al = (b: number) => Math.ceil(b / 256) * 256;
  const slot = (offset: number, width: number) => ({ offset, n: d.N * width, size: bytes(f16AttnInputElems(d.N, width)) });
  const q = qkv ? slot(0, d.QC) : null;
  const k = q ? slot(al(bytes(q.n)), d.KVC) : null;
  const v = k ? slot(k.offset + al(bytes(k.n)), d.KVC) : null;
  const dO = backward ? slot(v ? v.offset + al(bytes(v.n)) : 0, d.QC) : null;
  return { q, k, v, dO, bytes: Math.max(...[q, k, v, dO].map((s) => (s ? s.offset + s.size : 0))) };
}

/**
 * The slots of f16AttnInputSlots in `buffer`: the kernels' (padded) bindings, and the producers' exact
 * outputs; `cells`: a layer's f16 cells of q, k, v (padded: f16CellBytes) in place of their slots.
 */
export function f16AttnInputBindings(buffer: GPUBuffer | undefined, d: ModelDims, twin: boolean, backward: boolean, qkv = true,
  cells?: Record<'q' | 'k' | 'v', GPUBuffer>): { in: F16AttnBwdInputs; out: Record<'q' | 'k' | 'v' | 'dO', F16Out> } {
  const slots = f16AttnInputSlots(d, twin, backward, qkv);
  const elem = twin ? 'f32' : 'f16';
  // A slot the plan has not (the forward's dO; q, k, v beside cells) binds nothing: 0 bytes.
  const some = buffer ?? cells?.q;
  if (!some || ((slots.q || slots.dO) && !buffer)) throw new Error('internal: the f16 attention\'s inputs need f16.qkv, which the plan has not');
  const bind = (s: { offset: number; size: number } | null) => ({ buffer: s ? buffer! : some, offset: s?.offset ?? 0, size: s?.size ?? 0 });
  const out = (s: { offset: number; n: number } | null): F16Out => ({ out: { buffer: s ? buffer! : some, offset: s?.offset ?? 0, size: f16OperandBytes(s?.n ?? 0, twin) }, elem });
  if (cells) {
    const n = { q: d.N * d.QC, k: d.N * d.KVC, v: d.N * d.KVC };
    const cell = (k: 'q' | 'k' | 'v') => ({ buffer: cells[k], offset: 0, size: f16CellBytes(d, k, n[k], twin) });
    const cellOut = (k: 'q' | 'k' | 'v'): F16Out => ({ out: { buffer: cells[k], offset: 0, size: f16OperandBytes(n[k], twin) }, elem });
    return {
      in: { q: cell('q'), k: cell('k'), v: cell('v'), dO: bind(slots.dO), elem },
      out: { q: cellOut('q'), k: cellOut('k'), v: cellOut('v'), dO: out(slots.dO) },
    };
  }
  if (!slots.q || !slots.k || !slots.v) throw new Error('internal: f16.qkv has no q, k, v slots and the layer no f16 cells of them');
  return {
    in: { q: bind(slots.q), k: bind(slots.k), v: bind(slots.v), dO: bind(slots.dO), elem },
    out: { q: out(slots.q), k: out(slots.k), v: out(slots.v), dO: out(slots.dO) },
  };
}

/**
 * Dispatches that store x [n] (fp32) in its f16 cell (f16Cells) where no producer wrote it: the operand
 * copy's cast (its packed words are packF16's bit for bit; the twin: f32 elements holding the f16 values).
 */
export function packF16Cell(rt: Runtime, o: { label: string; x: Binding; cell: GPUBuffer; n: number; twin: boolean }): Dispatch[] {
  return [castF16Operand(rt, { label: o.label, x: o.x, out: { buffer: o.cell, offset: 0, size: f16OperandBytes(o.n, o.twin) }, n: o.n, elem: o.twin ? 'f32' : 'f16' })];
}

/** Dispatches that expand an f16 cell's n values into fp32 `out`: unpackF16 (the same packed words), or in the twin a copy of its f32 elements. */
export function unpackF16Cell(rt: Runtime, o: { label: string; cell: GPUBuffer; out: Binding; n: number; twin: boolean }): Dispatch[] {
  const cell = { buffer: o.cell, offset: 0, size: f16OperandBytes(o.n, o.twin) };
  return o.twin ? [copy(rt, { label: `${o.label}.f16cell`, src: cell, dst: o.out, n: o.n })] : unpackF16(rt, { label: o.label, words: cell, out: o.out, n: o.n });
}
