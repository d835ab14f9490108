/**
 * Flash attention in f16 on subgroup matrices (./code.ts, ./code-bwd.ts): the host dispatch. A call
 * runs the spec ./picks.ts chooses for it: only a spec that passed its check on the device
 * (./checks.ts enableF16Attention, verifyTunedF16Attention) serves attentionForwardF16 /
 * attentionBackwardF16. o and lse are in the fp32 backward's layout.
 * The kernels the model runs (and the checks) read f16 copies of q, k, v (and dO) padded past the
 * last row (F16AttnInputs); the fp32-staging kernels stay for bench/f16-attn-device.ts's comparison.
 */
import type { Binding, Dispatch, Runtime } from '../../../gpu/runtime';
import { attentionDi, attentionParams, dkdvBindings, forwardBindings, requireF16Out, type Shape } from '../attention';
import { type DsChunk, pairChunks } from '../ds';
import { type F16Out, f16OperandBytes } from '../../matmul-f16/cast';
import { asSlice, bindingBytes, requireBytes } from '../../launch';
import { type F16AttnFwdOptions, f16AttnBlockQ, f16AttnForwardCode, f16AttnInputElems, f16AttnLabel, f16AttnSpecError, type F16AttnSpec } from './code';
import { f16AttnBwdPairError, f16AttnBwdSpecError, f16AttnDkdvCode, f16AttnDqCode, f16AttnDqDsCode, f16AttnDsPairBytes } from './code-bwd';
import { f16AttnBwdLabel, type F16AttnBwdSpecs } from './layouts';
import { f16AttentionBackwardSpecsFor, f16AttentionSpecFor } from './picks';

/**
 * f16 copies of q, k, v the forward reads instead of the fp32 tensors (RoPE writes q's and k's, a cast
 * v's): f16 packed two to a word, or f32 holding f16 values in the twin (elem 'f32', with `emulate`).
 * Each binding covers f16AttnInputElems of its tensor (the last blocks' loads read past T).
 */
export interface F16AttnInputs { q: Binding; k: Binding; v: Binding; elem: 'f16' | 'f32' }

/** The backward's f16 inputs: q's, k's, v's and dO's copies (dO laid out as q), each padded as F16AttnInputs'. */
export interface F16AttnBwdInputs extends F16AttnInputs { dO: Binding }

/** Checks f16 input copies against the kernel variant (packed f16 for the real kernel, f32 for the twin) and their padded sizes. */
function checkInputs(label: string, a: Shape & { emulate?: boolean }, h: F16AttnInputs, extra: [string, Binding, number][] = []): void {
  if ((h.elem === 'f32') !== !!a.emulate) throw new Error(`${label}: f16 q/k/v copies stored as ${h.elem} need ${h.elem === 'f32' ? 'the emulated twin (emulate)' : 'the real kernel (no emulate)'}`);
  const rows = a.B * a.T;
  for (const [name, b, heads] of [['q16', h.q, a.nH], ['k16', h.k, a.nKV], ['v16', h.v, a.nKV], ...extra] as const) {
    requireBytes(label, name, b, f16OperandBytes(f16AttnInputElems(rows, heads * a.D), h.elem === 'f32'));
  }
}

export interface AttentionForwardF16Args extends Shape {
  label: string;
  /** fp32 q, k, v (cast to f16 as they are staged), o and lse fp32 in the fp32 attention's layouts. */
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  /** Force a spec (tests, benchmarks); default: the one enableF16Attention verified for D. */
  spec?: F16AttnSpec;
  /** The kernel with emulated subgroup matrices over f32 (runs without f16 and subgroup matrices: CI). */
  emulate?: boolean;
  /** Where the kernel also writes o's f16 copy (o_proj's f16 GEMM's X): the bits castF16Operand makes of o. */
  o16?: F16Out;
  /** The f16 copies of q, k, v (the model's path): staged by vector loads, or read by the matrix loads (spec.load 'direct'); q, k, v are then not read. */
  qkv16?: F16AttnInputs;
  /** Bench only: the earlier kernel's row max, every lane scanning the row (F16AttnFwdOptions.rowMax). */
  rowMax?: F16AttnFwdOptions['rowMax'];
}

function checkShape(label: string, s: Shape, spec: F16AttnSpec): void {
  if (s.D !== spec.D) throw new Error(`${label}: f16 attention spec is for head dim ${spec.D}, not ${s.D}`);
  if (s.nH % s.nKV !== 0) throw new Error(`${label}: nH ${s.nH} not a multiple of nKV ${s.nKV}`);
}

/** o = softmax(q·kᵀ/√D + causal mask)·v per (b, h), lse saved: one dispatch, f16 operands, f32 accumulation and statistics. */
export function attentionForwardF16(rt: Runtime, a: AttentionForwardF16Args): Dispatch[] {
  const spec = a.spec ?? f16AttentionSpecFor(rt, a, a.emulate);
  if (!spec) throw new Error(`${a.label}: no verified f16 attention kernel for head dim ${a.D} on this device (enableF16Attention): use the fp32 attention`);
  checkShape(a.label, a, spec);
  const lim = rt.device.limits;
  const h = a.qkv16;
  const err = f16AttnSpecError(spec, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, a.emulate, !!h);
  if (err) throw new Error(`${a.label}: ${f16AttnLabel(spec)}: ${err}`);
  if (h) checkInputs(a.label, a, h);
  return [rt.kernel({
    label: `${a.label}.attnFwdF16${h ? 'D' : ''}${a.o16 ? 'H' : ''}`,
    code: f16AttnForwardCode(spec, { emulate: a.emulate, o16: a.o16?.elem, inputs: h ? 'f16' : 'f32', rowMax: a.rowMax }),
    bindings: forwardBindings(rt, h ? { ...a, q: h.q, k: h.k, v: h.v } : a),
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / f16AttnBlockQ(spec)), a.B * a.nH],
  })];
}

export interface AttentionBackwardF16Args extends Shape {
  label: string;
  /** fp32 q, k, v, o, lse, dO as the fp32 backward takes them; dq, dk, dv fp32, overwritten. */
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  dO: Binding;
  dq: Binding;
  dk: Binding;
  dv: Binding;
  /** Di ([B, nH, T] fp32, attentionBackwardWorkspaceBytes): written by the dq kernel, read by dk/dv. */
  workspace: Binding;
  specs?: F16AttnBwdSpecs;
  emulate?: boolean;
  /** Where the dk/dv kernel also writes dv's f16 copy (v_proj's f16 dX and dW GEMMs read it). */
  dv16?: F16Out;
  /** f16 copies of q, k, v, dO (staged, or read by the matrix loads per spec.load); the fp32 q, k, v, dO are then not read (Di = rowsum(dO∘o) takes dO's copy; with stored dS the fp32 dO). */
  qkv16?: F16AttnBwdInputs;
  /**
   * Scratch dead during this backward, of any size (the model's dF1, as the fp32 stored-dS path's):
   * stored-dS specs (spec.ds) keep dS there, a chunk of (b, KV head) pairs at a time (f16AttnDsChunks).
   */
  dsScratch?: Binding;
}

/** The stored-dS backward's chunks of (b, KV head) pairs for a scratch of `bytes` ([] when one pair's dS does not fit). */
export function f16AttnDsChunks(s: Shape, bytes: number, emulate = false): DsChunk[] {
  return pairChunks(s.B * s.nKV, Math.floor(bytes / f16AttnDsPairBytes(s.T, s.nH / s.nKV, emulate)));
}

/**
 * dq, dk, dv from q, k, v, o, lse, dO with f16 operands on subgroup matrices: the dq kernel (writes Di),
 * then the dk/dv kernel; or with stored-dS specs (spec.ds) the Di pass, then per chunk of (b, KV head)
 * pairs the dk/dv kernel storing dS into dsScratch and dq from it.
 */
export function attentionBackwardF16(rt: Runtime, a: AttentionBackwardF16Args): Dispatch[] {
  const specs = a.specs ?? f16AttentionBackwardSpecsFor(rt, a, a.emulate, true, !!a.dsScratch && f16AttnDsChunks(a, bindingBytes(a.dsScratch), a.emulate).length > 0);
  if (!specs) throw new Error(`${a.label}: no verified f16 attention backward for head dim ${a.D} on this device (enableF16Attention): use the fp32 backward`);
  const lim = rt.device.limits;
  const h = a.qkv16;
  if (h) checkInputs(a.label, a, h, [['dO16', h.dO, a.nH]]);
  const inputs = h ? 'f16' : 'f32';
  for (const kind of ['dq', 'dkdv'] as const) {
    checkShape(a.label, a, specs[kind]);
    const err = f16AttnBwdSpecError(kind, specs[kind], lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, a.emulate, !!h);
    if (err) throw new Error(`${a.label}: f16 attention ${kind} ${f16AttnLabel(specs[kind])}: ${err}`);
  }
  const pairErr = f16AttnBwdPairError(specs);
  if (pairErr) throw new Error(`${a.label}: ${f16AttnBwdLabel(specs)}: ${pairErr}`);
  const u = attentionParams(rt, a.label, a);
  const empty = a.T === 0 || a.B === 0;
  if (a.dv16) requireF16Out(a.label, 'dv16', a.dv16, a.B * a.T * a.nKV * a.D);
  if (specs.dq.ds) {
    // Stored dS (f16AttnDqDsCode): Di first, then per chunk of pairs dk/dv storing dS and dq from it.
    const G = a.nH / a.nKV;
    const pairBytes = f16AttnDsPairBytes(a.T, G, !!a.emulate);
    const chunks = a.dsScratch ? f16AttnDsChunks(a, bindingBytes(a.dsScratch), a.emulate) : [];
    if (!chunks.length) {
      throw new Error(`${a.label}: ${f16AttnBwdLabel(specs)} stores dS and needs a dsScratch of at least one (b, KV head) pair's ${pairBytes} bytes (${a.dsScratch ? `${bindingBytes(a.dsScratch)} given` : 'none given'}): use a recomputing spec`);
    }
    const scratch = asSlice(a.dsScratch!);
    return [attentionDi(rt, a, a.workspace, u), ...chunks.flatMap((c, i) => {
      const lab = chunks.length > 1 ? `${a.label}.c${i}` : a.label;
      const uc = attentionParams(rt, lab, a, c.pair0);
      const dS: Binding = { buffer: scratch.buffer, offset: scratch.offset ?? 0, size: c.pairs * pairBytes };
      return [
        rt.kernel({
          label: `${lab}.attnBwdDkDvDsF16${h ? 'D' : ''}${a.dv16 ? 'H' : ''}`,
          code: f16AttnDkdvCode(specs.dkdv, { emulate: a.emulate, dv16: a.dv16?.elem, inputs }),
          bindings: [...dkdvBindings(h ? { ...a, q: h.q, k: h.k, v: h.v, dO: h.dO } : a, a.workspace, uc), dS],
          workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dkdv)), c.pairs],
        }),
        rt.kernel({
          label: `${lab}.attnBwdDqDsF16`,
          code: f16AttnDqDsCode(specs.dq, { emulate: a.emulate }),
          bindings: [dS, h!.k, uc, a.dq],
          workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dq)), c.pairs * G],
        }),
      ];
    })];
  }
  return [
    rt.kernel({
      label: `${a.label}.attnBwdDqF16${h ? 'D' : ''}`,
      code: f16AttnDqCode(specs.dq, { emulate: a.emulate, inputs }),
      bindings: h ? [h.q, h.k, h.v, a.o, h.dO, a.lse, a.workspace, a.dq, u] : [a.q, a.k, a.v, a.o, a.dO, a.lse, a.workspace, a.dq, u],
      workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dq)), a.B * a.nH],
    }),
    rt.kernel({
      label: `${a.label}.attnBwdDkDvF16${h ? 'D' : ''}${a.dv16 ? 'H' : ''}`,
      code: f16AttnDkdvCode(specs.dkdv, { emulate: a.emulate, dv16: a.dv16?.elem, inputs }),
      bindings: dkdvBindings(h ? { ...a, q: h.q, k: h.k, v: h.v, dO: h.dO } : a, a.workspace, u),
      workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dkdv)), a.B * a.nKV],
    }),
  ];
}
