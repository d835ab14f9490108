/**
 * A layer's INT8 attention scores (compute.attention_qk 'int8', kernels/attention-i8.ts): Q's and K's
 * codes and scales per (token, head) row in the plan's i8.qc / i8.qs / i8.kc / i8.ks. The forward's
 * RoPE writes them (ropeQuantized) where the head dim allows, else a quantizer follows it; the
 * backward quantizes the saved q and k again, which gives the same codes, so it rebuilds the
 * forward's scores. The kernel the scores ran on is recorded under `L<l>.attn`.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { ATTN_SCORE_PATH, quantizeHeadsI8 } from '../kernels/attention-i8';
import { rope, ropeQuantized, ropeQuantizedFits } from '../kernels/rope';
import type { GemmPath } from './compute-plan';
import type { ModelDims } from './dims';

export interface ScoreCodes { qc: GPUBuffer; qs: GPUBuffer; kc: GPUBuffer; ks: GPUBuffer }

function buffers(b: (key: string) => GPUBuffer): ScoreCodes {
  return { qc: b('i8.qc'), qs: b('i8.qs'), kc: b('i8.kc'), ks: b('i8.ks') };
}

/** The codes of q and k (already rotated) into the plan's buffers: the backward's, or the forward's where RoPE cannot write them. */
export function scoreCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, q: Binding, k: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: ScoreCodes } {
  const codes = buffers(b);
  paths.set(`L${l}.attn`, ATTN_SCORE_PATH);
  return {
    dispatches: [
      ...quantizeHeadsI8(rt, `L${l}.attn.qc`, q, d.N * d.nH, d.D, codes.qc, codes.qs),
      ...quantizeHeadsI8(rt, `L${l}.attn.kc`, k, d.N * d.nKV, d.D, codes.kc, codes.ks),
    ],
    codes,
  };
}

/** One of the forward's two rotations (q or k), writing its codes too where ropeQuantized runs at this head dim. */
export function ropeWithCodes(rt: Runtime, b: (key: string) => GPUBuffer, which: 'q' | 'k',
  a: { label: string; x: Binding; y: Binding; table: Binding; B: number; T: number; nHeads: number; D: number }): Dispatch {
  if (!ropeQuantizedFits(a.D)) return rope(rt, a);
  const c = buffers(b);
  return ropeQuantized(rt, { ...a, codes: which === 'q' ? c.qc : c.kc, scales: which === 'q' ? c.qs : c.ks });
}

/** The forward's codes: none to add where RoPE wrote them, else the quantizers after it. */
export function forwardScoreCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, q: Binding, k: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: ScoreCodes } {
  const sc = scoreCodes(rt, b, l, q, k, d, paths);
  return ropeQuantizedFits(d.D) ? { dispatches: [], codes: sc.codes } : sc;
}
