/**
 * The backward pass of LlamaGpu (llama.ts) as one dispatch list, from the LM head's input gradient
 * (dh: the head's backward ran chunk by chunk at the forward's end, lm-head.ts): the final norm, the
 * layers in reverse, the embedding; each weight gradient stored as it becomes final.
 */
import { type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import { attentionBackward } from '../kernels/attention/attention';
import { attentionBackwardI8 } from '../kernels/attention/i8';
import { attentionBackwardF16 } from '../kernels/attention/f16/attention-f16';
import { f16AttnInputBindings, f16AttnQkvSlots } from './f16-operands';
import { embeddingBackward } from '../kernels/embedding/embedding';
import { unpackHalfRows } from '../kernels/f16/f16';
import { castF16Operand } from '../kernels/matmul-f16/cast';
import { dequantizeRows } from '../kernels/quantize/quantize';
import { rmsnormBackward } from '../kernels/rmsnorm/rmsnorm';
import { swigluBackward, swigluBackwardF16, swigluBackwardQuantized, swigluBackwardStored } from '../kernels/swiglu/swiglu';
import { type TensorParallel } from './tp/tp';
import { dpCodes, scoreCodes } from './attention-scores';
import { type ModelConfig } from './config';
import type { GemmInputSaved, GemmPath } from './compute-plan';
import { type LinearGemms } from './linear-gemms';
import { isHalf, type LayerSavedKey, liveKey, type ModelBuildOptions, type ModelDims } from './plan';
import { type RunPlan } from '../plan/run-plan';
import type { LoraGemms } from '../lora/gemms';
import type { LowRank } from '../kernels/matmul/matmul';

/** What the backward reads of the model: its buffers, saved tensors, GEMMs and gradient outputs. */
export interface BackwardModel {
  readonly rt: Runtime;
  readonly cfg: ModelConfig;
  readonly dims: ModelDims;
  readonly plan: RunPlan;
  readonly tp: TensorParallel | null;
  readonly g: LinearGemms;
  /** LoRA adapters over a frozen base (plan.lora): the base's dW GEMMs give way to the adapters' gradients. */
  readonly lora: LoraGemms | null;
  readonly attnDqPath: ModelBuildOptions['attnDqPath'];
  /** Tests: the f16 attention's forced specs (ModelBuildOptions.f16Attention). */
  readonly f16Attention?: ModelBuildOptions['f16Attention'];
  /** The kernel each layer's INT8 attention scores ran on (attention-scores.ts). */
  readonly attnPaths: Map<string, GemmPath>;
  b(key: string): GPUBuffer;
  param(name: string): Binding;
  saved(l: number, key: LayerSavedKey): GPUBuffer;
  loadSaved(l: number, key: LayerSavedKey): Dispatch[];
  gradOut(name: string): Binding;
  storeGrad(name: string): Dispatch[];
  /** Layer l's forward again, up to what its backward reads (plan.checkpoint: into the layers' shared saved set). */
  recompute(l: number): Dispatch[];
}

/**
 * The order matters for memory: a quantized tensor is dequantized into its live copy just before
 * its consumers, and several live copies share backward scratch buffers (LIVE_ALIAS), so each
 * scratch buffer's previous content must be dead by then. Weight gradients that read a live copy
 * run before the input-gradient GEMM that overwrites the same scratch.
 */
export function buildBackward(m: BackwardModel, g: Dispatch[], gradFinal: Map<string, number>): void {
  const { rt } = m;
  const { B, T, N, C, F, nH, nKV, D, QC, KVC, V, L } = m.dims;
  const eps = m.cfg.rms_norm_eps;
  const push = (d: Dispatch | Dispatch[]) => (Array.isArray(d) ? g.push(...d) : g.push(d));
  // A frozen base (LoRA) produces no weight gradient: its norms' go to a scratch, its dW GEMMs do not run.
  const frozen = !!m.plan.lora;
  // Each gradient producer writes gradOut(name); store(name) then quantizes it (AGoQ storage).
  const gp = (name: string): Binding => (frozen ? m.b('frozenDw') : m.gradOut(name));
  const store = (name: string) => {
    if (frozen) return;
    push(m.storeGrad(name));
    gradFinal.set(name, g.length);
  };
  /**
   * Layer l's linear `name`'s weight gradient from dY [N, outW] and its input x [N, inW] (live
   * here): the base dW GEMM, or with a frozen base its LoRA adapter's dA, dB (none without one).
   */
  /** Layer l's saved `key` as its f16 cell for a frozen base's adapters (no dropout), which then read no fp32 unpack of it. */
  const loraCell = (l: number, key: GemmInputSaved) => (m.lora?.readsCells ? m.g.loraX(l, key) : undefined);
  const dW = (l: number, label: string, dy: GPUBuffer, outW: number, x: GPUBuffer, key: GemmInputSaved, inW: number, name: string, scratch: 'dq' | 'dF1', xShared = false) => {
    const full = `model.layers.${l}.${name}`;
    if (!frozen) {
      m.g.dwGemm(l, label, dy, outW, x, inW, gp(full), scratch, push, xShared, key);
      store(full);
      return;
    }
    const ad = m.lora?.on(full);
    if (ad) push(m.lora!.grads(ad, label, dy, loraCell(l, key) ?? x, m.plan.wire.tp ? undefined : m.b(scratch)));
  };
  /**
   * The dX term of the LoRA group whose first member is layer l's linear `name`, for that base dX
   * GEMM's epilogue where that GEMM takes one (undefined: none, or loraDx adds it).
   */
  const loraDxTerm = (l: number, name: string): LowRank | undefined => {
    const ad = m.lora?.on(`model.layers.${l}.${name}`);
    return ad && m.lora!.epilogue && m.g.lowRankFits(l, 'dx', name) ? m.lora!.dxLowRank(ad) : undefined;
  };
  /** dX += the adapter's term, after the base dX GEMM of layer l's linear `name` wrote dx (unless that GEMM's epilogue added it). */
  const loraDx = (l: number, label: string, name: string, dx: GPUBuffer) => {
    const ad = m.lora?.on(`model.layers.${l}.${name}`);
    if (ad && !loraDxTerm(l, name)) push(m.lora!.dx(ad, label, dx));
  };
  const dh = m.b('dh');
  const dres = m.b('dres');
  const dF1 = m.b('dF1');
  const normWs = m.b('normWs');
  // dh holds the head's dX; the head's dW is final too (tied: the embedding's is added below).
  push(m.loadSaved(L, 'xFinal'));
  push(rmsnormBackward(rt, { label: 'normF.bwd', x: m.saved(L, 'xFinal'), w: m.param('model.norm.weight'), rstd: m.b('rstdF'), dy: dh, dx: dres, dw: gp('model.norm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: false, dxCodes: m.g.dyCodes(L - 1), dx16: m.g.dyOut(L - 1, 'dres', dres, C) }));
  store('model.norm.weight');
  for (let l = L - 1; l >= 0; l--) {
    const p = (s: string) => m.param(`model.layers.${l}.${s}`);
    const gr = (s: string) => gp(`model.layers.${l}.${s}`);
    const storeL = (s: string) => store(`model.layers.${l}.${s}`);
    const a = (s: LayerSavedKey) => m.saved(l, s);
    const load = (k: LayerSavedKey) => push(m.loadSaved(l, k));
    // A dW GEMM's X read from its f16 cell needs no fp32 copy, nor does a frozen base's adapters' (loraCell).
    const loadX = (k: GemmInputSaved) => { if (frozen ? !loraCell(l, k) : !m.g.xFromCell(l, k)) load(k); };
    const lab = (s: string) => `L${l}.${s}`;
    // Checkpointing: refill the shared saved set from layer l's input (the last layer's is still there from the forward).
    if (m.plan.checkpoint && l < L - 1) push(m.recompute(l));
    // MLP. dWdown = dresᵀ·act first: act's live copy is dF1, which down.dx then overwrites with dact.
    loadX('act');
    dW(l, lab('down.dw'), dres, C, a('act'), 'act', F, 'mlp.down_proj.weight', 'dq');
    // dres's codes come from the RMSNorm backward that produced it (normF's, or layer l+1's norm1).
    push(m.g.dxGemm(l, lab('down.dx'), dres, 'mlp.down_proj.weight', dF1, N, F, C, false, !!m.g.dyCodes(l), loraDxTerm(l, 'mlp.down_proj.weight')));
    loraDx(l, lab('down.dx'), 'mlp.down_proj.weight', dF1);
    // Where gate's live copy is f16.a (f16GateInA), its rows are dequantized block by block (swigluBackwardBlocks);
    // where the SwiGLU backward reads gate's and up's f16 storage (plan.swigluHalf, swigluBwdHalf), no fp32 gate to load.
    const gateBlocks = m.plan.f16Live.gate === 'f16.a';
    const fromStorage = m.plan.swigluHalf[l] || m.plan.swigluBwdHalf[l];
    if (!gateBlocks && !fromStorage) load('gate');
    // SwiGLU backward in place: gate becomes dgate; up becomes dup in up's live copy, which is
    // dF1 itself (dact) when up is stored (swigluBackwardBlocks). Where gate/up's dX is
    // one INT8 GEMM over K = 2F, it also writes the codes of [dgate | dup] (gateUpCodes) into i8.a,
    // which the dW GEMMs in between leave alone (theirs are i8.gt, i8.xt).
    const dup = m.plan.saved[l].up ? dF1 : a('up');
    const gateUpCodes = m.g.gateUpCodes(l);
    // Where gate/up's GEMMs run f16, it also writes the f16 copies of dgate and dup they read (gateUpF16).
    const gateUp16 = m.g.gateUpF16(l, a('gate'), dup);
    if (fromStorage) {
      if (!gateUp16) throw new Error(`internal: L${l}: the SwiGLU from f16 storage without dgate's and dup's f16 copies`);
      const words = (k: 'gate' | 'up') => m.b(`L${l}.${k}.codes`);
      // With fp32 readers of dgate and dup (plan.swigluBwdHalf): dgate into gate's live copy, dup over dF1, as the blocks leave them.
      const fp32 = m.plan.swigluBwdHalf[l] ? { dgate: a('gate') } : {};
      push(swigluBackwardStored(rt, { label: lab('swiglu.bwd'), gateWords: words('gate'), upWords: words('up'), dh: dF1, dims: { N, F }, ...gateUp16, ...fp32 }));
    } else if (m.plan.saved[l].up) push(swigluBackwardBlocks(m, l, lab('swiglu.bwd'), gateUpCodes, gateUp16, gateBlocks));
    else {
      const o = { label: lab('swiglu.bwd'), gate: a('gate'), up: a('up'), dh: dF1, dgate: a('gate'), dup: a('up'), dims: { N, F } };
      push(gateUpCodes ? [swigluBackwardQuantized(rt, { ...o, ...gateUpCodes })] : gateUp16 ? swigluBackwardF16(rt, { ...o, ...gateUp16 }) : [swigluBackward(rt, o)]);
    }
    loadX('h2'); // live copy in dh
    dW(l, lab('gate.dw'), a('gate'), F, a('h2'), 'h2', C, 'mlp.gate_proj.weight', 'dq');
    dW(l, lab('up.dw'), dup, F, a('h2'), 'h2', C, 'mlp.up_proj.weight', 'dq', true);
    if (m.tp) {
      push(m.tp.columnParallelDx(lab('mlp.dx.tp'), [
        { dy: a('gate'), ...m.g.weightAt(l, `model.layers.${l}.mlp.gate_proj.weight`), rows: F },
        { dy: dup, ...m.g.weightAt(l, `model.layers.${l}.mlp.up_proj.weight`), rows: F },
      ], dh));
    } else if (gateUpCodes) {
      push(m.g.gateUpDxGemm(l, lab('gate_up.dx'), dh));
    } else {
      push(m.g.dxGemm(l, lab('gate.dx'), a('gate'), 'mlp.gate_proj.weight', dh, N, C, F, false, false, loraDxTerm(l, 'mlp.gate_proj.weight')));
      // dq is free here (the MLP's dW partials are summed; xMid's load is next): an fp32 dX accumulates through it.
      push(m.g.dxGemm(l, lab('up.dx'), dup, 'mlp.up_proj.weight', dh, N, C, F, true, false, loraDxTerm(l, 'mlp.up_proj.weight'), m.b('dq')));
    }
    loraDx(l, lab('gate.dx'), 'mlp.gate_proj.weight', dh);
    loraDx(l, lab('up.dx'), 'mlp.up_proj.weight', dh);
    load('xMid'); // live copy in dq (free until the attention backward)
    push(rmsnormBackward(rt, { label: lab('norm2.bwd'), x: a('xMid'), w: p('post_attention_layernorm.weight'), rstd: a('rstd2'), dy: dh, dx: dres, dw: gr('post_attention_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true, dxCodes: m.g.dyCodes(l), dx16: m.g.dyOut(l, 'dres', dres, C) }));
    storeL('post_attention_layernorm.weight');
    // Attention: dWo = dresᵀ·o, dO = dres·Wo (into dh, free again).
    load('o'); // the attention backward reads o in fp32
    dW(l, lab('o.dw'), dres, C, a('o'), 'o', QC, 'self_attn.o_proj.weight', 'dF1');
    push(m.g.dxGemm(l, lab('o.dx'), dres, 'self_attn.o_proj.weight', dh, N, QC, C, false, !!m.g.dyCodes(l), loraDxTerm(l, 'self_attn.o_proj.weight')));
    loraDx(l, lab('o.dx'), 'self_attn.o_proj.weight', dh);
    const lc = m.plan.layers[l].compute;
    // The f16 attention backward reads q, k, v as f16 only: from their f16 cells where the plan has them (no fp32 copies).
    const f16Bwd = lc.attentionQk !== 'int8' && m.plan.f16?.layers[l].attentionBackward === 'f16-tensor-core';
    const qkvCells = m.plan.f16Cells[l].has('q');
    if (!(f16Bwd && qkvCells)) {
      load('q');
      load('k');
      load('v');
    }
    // dS (stored-dS path) goes to dF1: dead from o.dw's split-K partials to q.dw's, under every
    // scheme (no live copy aliases it then). Not under TP: ranks and the simulation must agree bit for bit.
    const dsScratch = m.plan.wire.tp ? undefined : dF1;
    // Where v_proj's dX or dW GEMM runs f16, the fp32-score kernels write dv's f16 copy too (INT8 scores: a cast below).
    const dv16 = lc.attentionQk === 'int8' ? undefined : m.g.dyOut(l, 'dv', m.b('dv'), KVC);
    const attn = { label: lab('attn.bwd'), q: a('q'), k: a('k'), v: a('v'), o: a('o'), lse: a('lse'), dO: dh, dq: m.b('dq'), dk: m.b('dk'), dv: m.b('dv'), workspace: m.b('attnWs'), dsScratch, dqPath: m.attnDqPath, B, T, nH, nKV, D, dv16 };
    if (lc.attentionQk === 'int8') {
      const sc = scoreCodes(rt, (key) => m.b(key), l, a('q'), a('k'), m.plan.dims, m.attnPaths);
      push(sc.dispatches);
      const dp = lc.attentionDp === 'int8' ? dpCodes(rt, (key) => m.b(key), l, dh, a('v'), m.plan.dims, m.attnPaths) : undefined;
      if (dp) push(dp.dispatches);
      push(attentionBackwardI8(rt, { ...attn, ...sc.codes, dp: dp?.codes }));
    } else if (f16Bwd) {
      // f16 operands on tensor cores (verified on this device): dq (writing Di to attnWs), then dk/dv.
      m.attnPaths.set(`L${l}.attnDp`, 'f16-tensor-core');
      // The kernels read f16 copies of q, k, v, dO: q's, k's and v's f16 cells where the plan has them,
      // else f16.qkv's slots, cast here as dO's is.
      const cells = qkvCells ? { q: m.b(`L${l}.q.codes`), k: m.b(`L${l}.k.codes`), v: m.b(`L${l}.v.codes`) } : undefined;
      const h = f16AttnInputBindings(m.b('f16.qkv'), m.plan.dims, !!m.plan.f16Twin, true, f16AttnQkvSlots(m.plan.f16?.layers, m.plan.f16Cells), cells);
      const casts = [[a('q'), 'q', N * QC], [a('k'), 'k', N * KVC], [a('v'), 'v', N * KVC], [dh, 'dO', N * QC]] as const;
      for (const [x, key, n] of casts.filter(([, key]) => key === 'dO' || !cells)) {
        push(castF16Operand(rt, { label: lab(`attn.bwd.${key}16`), x, out: h.out[key].out, n, elem: h.in.elem }));
      }
      push(attentionBackwardF16(rt, { ...attn, qkv16: h.in, specs: m.f16Attention?.backward, emulate: m.f16Attention?.emulate }));
    } else {
      push(attentionBackward(rt, attn));
    }
    // Undo RoPE on dq, dk (qRaw/kRaw are free during backward and hold the results).
    // Where q/k/v's GEMMs run f16, the rotations write dq's and dk's f16 copies too.
    push(m.g.ropeBackward(l, 'dq', { label: lab('rope_q.bwd'), x: m.b('dq'), y: m.b('qRaw'), table: m.b('rope'), B, T, nHeads: nH, D, inverse: true }));
    push(m.g.ropeBackward(l, 'dk', { label: lab('rope_k.bwd'), x: m.b('dk'), y: m.b('kRaw'), table: m.b('rope'), B, T, nHeads: nKV, D, inverse: true }));
    if (lc.attentionQk === 'int8') push(m.g.dvCast(l, lab('dv'), m.b('dv')));
    loadX('h1'); // live copy in dh (dO is consumed)
    dW(l, lab('q.dw'), m.b('qRaw'), QC, a('h1'), 'h1', C, 'self_attn.q_proj.weight', 'dF1');
    dW(l, lab('k.dw'), m.b('kRaw'), KVC, a('h1'), 'h1', C, 'self_attn.k_proj.weight', 'dF1', true);
    dW(l, lab('v.dw'), m.b('dv'), KVC, a('h1'), 'h1', C, 'self_attn.v_proj.weight', 'dF1', true);
    if (m.tp) {
      push(m.tp.columnParallelDx(lab('qkv.dx.tp'), [
        { dy: m.b('qRaw'), ...m.g.weightAt(l, `model.layers.${l}.self_attn.q_proj.weight`), rows: QC },
        { dy: m.b('kRaw'), ...m.g.weightAt(l, `model.layers.${l}.self_attn.k_proj.weight`), rows: KVC },
        { dy: m.b('dv'), ...m.g.weightAt(l, `model.layers.${l}.self_attn.v_proj.weight`), rows: KVC },
      ], dh));
    } else {
      push(m.g.dxGemm(l, lab('q.dx'), m.b('qRaw'), 'self_attn.q_proj.weight', dh, N, C, QC, false, false, loraDxTerm(l, 'self_attn.q_proj.weight')));
      push(m.g.dxGemm(l, lab('k.dx'), m.b('kRaw'), 'self_attn.k_proj.weight', dh, N, C, KVC, true, false, loraDxTerm(l, 'self_attn.k_proj.weight')));
      push(m.g.dxGemm(l, lab('v.dx'), m.b('dv'), 'self_attn.v_proj.weight', dh, N, C, KVC, true, false, loraDxTerm(l, 'self_attn.v_proj.weight')));
    }
    loraDx(l, lab('q.dx'), 'self_attn.q_proj.weight', dh);
    loraDx(l, lab('k.dx'), 'self_attn.k_proj.weight', dh);
    loraDx(l, lab('v.dx'), 'self_attn.v_proj.weight', dh);
    load('xIn'); // live copy in qRaw (consumed by q.dx above)
    push(rmsnormBackward(rt, { label: lab('norm1.bwd'), x: a('xIn'), w: p('input_layernorm.weight'), rstd: a('rstd1'), dy: dh, dx: dres, dw: gr('input_layernorm.weight'), workspace: normWs, dims: { N, C, eps }, accumulate: true, dxCodes: l > 0 ? m.g.dyCodes(l - 1) : undefined, dx16: m.g.dyOut(l - 1, 'dres', dres, C) }));
    storeL('input_layernorm.weight');
  }
  if (!frozen) push(embeddingBackward(rt, { label: 'embed.bwd', ids: m.b('ids'), dout: dres, dW: gp('model.embed_tokens.weight'), workspace: m.b('embedWs'), dims: { N, V, C }, accumulate: m.cfg.tie_word_embeddings }));
  store('model.embed_tokens.weight');
}

/**
 * SwiGLU backward of layer l with `up` stored (quantized, bf16 or f16): dF1 holds dact and gate's live copy holds
 * gate. Per block of rows: dequantize (unpack) up's rows into `swigluBlock`, then the backward writes dgate
 * over the gate rows and dup over the dact rows. Afterwards gate's live copy holds dgate and dF1
 * holds dup. Same arithmetic per element as dequantizing up whole. `gateBlocks` (f16GateInA): gate has no
 * live copy here; each block's gate rows are dequantized into dh (free until h2's load) and its dgate
 * rows stay there, read by nothing but the dgate f16 copy's writer (`f16`, which the f16 GEMMs read).
 */
function swigluBackwardBlocks(m: BackwardModel, l: number, label: string, codes?: { codes: GPUBuffer; scales: GPUBuffer },
  f16?: ReturnType<LinearGemms['gateUpF16']>, gateBlocks = false): Dispatch[] {
  const { N, F } = m.dims;
  const rows = m.plan.swigluRows;
  const bytes = rows * F * 4;
  const block: Binding = { buffer: m.b('swigluBlock'), offset: 0, size: bytes };
  const gateBlock: Binding = { buffer: m.b('dh'), offset: 0, size: bytes };
  if (gateBlocks && (!f16 || codes)) throw new Error(`internal: ${label}: gate's rows in blocks need dgate's f16 copy as its only reader`);
  const unpackRows = (key: 'up' | 'gate', r0: number, lab: string, to: Binding): Dispatch[] => {
    const s = m.plan.saved[l][key]!;
    return isHalf(s) ? unpackHalfRows(m.rt, s.format, { label: lab, words: m.b(`L${l}.${key}.codes`), width: F, r0, rows, out: to })
      : [dequantizeRows(m.rt, lab, s, F, r0, rows, m.b(`L${l}.${key}.codes`), m.b(`L${l}.${key}.scales`), to)];
  };
  const out: Dispatch[] = [];
  for (let r0 = 0; r0 < N; r0 += rows) {
    const at = (key: string): Binding => ({ buffer: m.b(key), offset: r0 * F * 4, size: bytes });
    const lab = `${label}.rows${r0}`;
    out.push(...unpackRows('up', r0, lab, block));
    if (gateBlocks) out.push(...unpackRows('gate', r0, `${lab}.gate`, gateBlock));
    const gate = gateBlocks ? gateBlock : at(liveKey('gate'));
    const dact = at('dF1');
    const o = { label: lab, gate, up: block, dh: dact, dgate: gate, dup: dact, dims: { N: rows, F } };
    if (codes) out.push(swigluBackwardQuantized(m.rt, { ...o, ...codes, row0: r0 }));
    else out.push(...(f16 ? swigluBackwardF16(m.rt, { ...o, ...f16, row0: r0 }) : [swigluBackward(m.rt, o)]));
  }
  return out;
}
