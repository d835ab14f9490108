/**
 * A layer's INT8 attention (kernels/attention-i8.ts): with compute.attention_qk 'int8', Q's and K's
 * codes and scales per (token, head) row in the plan's head-codes buffers i8.qc / i8.kc. The
 * forward's RoPE writes them (ropeQuantized) where the head dim allows, else a quantizer follows it;
 * the backward quantizes the saved q and k again, which gives the same codes, so it rebuilds the
 * forward's scores. With attention_dp 'int8' too, the backward also quantizes dO and v (i8.oc /
 * i8.vc) for dP. The kernels are recorded under `L<l>.attn` and `L<l>.attnDp`.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { ATTN_SCORE_PATH, headCodesSlices, quantizeHeadsI8 } from '../kernels/attention/i8';
import { rope, ropeQuantized, ropeQuantizedFits } from '../kernels/rope/rope';
import type { GemmPath } from './compute-plan';
import type { ModelDims } from './dims';

export interface ScoreCodes { qc: GPUBuffer; kc: GPUBuffer }

function buffers(b: (key: string) => GPUBuffer): ScoreCodes {
  return { qc: b('i8.qc'), kc: b('i8.kc') };
}

/** The codes of a query-shaped and a KV-shaped tensor of layer l into two head-codes buffers, the kernel recorded under `L<l>.<path>`. */
function pairCodes(rt: Runtime, l: number, path: 'attn' | 'attnDp', qShaped: [string, Binding, GPUBuffer], kvShaped: [string, Binding, GPUBuffer],
  d: ModelDims, paths: Map<string, GemmPath>): Dispatch[] {
  paths.set(`L${l}.${path}`, ATTN_SCORE_PATH);
  return [
    ...quantizeHeadsI8(rt, `L${l}.attn.${qShaped[0]}`, qShaped[1], d.N * d.nH, d.D, qShaped[2]),
    ...quantizeHeadsI8(rt, `L${l}.attn.${kvShaped[0]}`, kvShaped[1], d.N * d.nKV, d.D, kvShaped[2]),
  ];
}

/** The codes of q and k (already rotated) into the plan's buffers: the backward's, or the forward's where RoPE cannot write them. */
export function scoreCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, q: Binding, k: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: ScoreCodes } {
  const codes = buffers(b);
  return { dispatches: pairCodes(rt, l, 'attn', ['qc', q, codes.qc], ['kc', k, codes.kc], d, paths), codes };
}

/** The backward's codes of dO and v for an INT8 dP, in the plan's i8.oc / i8.vc. */
export function dpCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, dO: Binding, v: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: { oc: GPUBuffer; vc: GPUBuffer } } {
  const codes = { oc: b('i8.oc'), vc: b('i8.vc') };
  return { dispatches: pairCodes(rt, l, 'attnDp', ['oc', dO, codes.oc], ['vc', v, codes.vc], d, paths), codes };
}

/** One of the forward's two rotations (q or k), writing its codes too where ropeQuantized runs at this head dim. */
export function ropeWithCodes(rt: Runtime, b: (key: string) => GPUBuffer, which: 'q' | 'k',
  a: { label: string; x: Binding; y: Binding; table: Binding; B: number; T: number; nHeads: number; D: number }): Dispatch {
  if (!ropeQuantizedFits(a.D)) return rope(rt, a);
  const c = buffers(b);
  const s = headCodesSlices(which === 'q' ? c.qc : c.kc, a.B * a.T * a.nHeads, a.D);
  return ropeQuantized(rt, { ...a, codes: s.codes, scales: s.scales });
}

/** The forward's codes: none to add where RoPE wrote them, else the quantizers after it. */
export function forwardScoreCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, q: Binding, k: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: ScoreCodes } {
  const sc = scoreCodes(rt, b, l, q, k, d, paths);
  return ropeQuantizedFits(d.D) ? { dispatches: [], codes: sc.codes } : sc;
}
