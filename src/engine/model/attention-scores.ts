/**
 * A layer's INT8 attention scores (compute.attention_qk 'int8', kernels/attention-i8.ts): Q and K
 * quantized per (token, head) row into the plan's i8.qc / i8.qs / i8.kc / i8.ks, before the forward
 * and again before the backward (the same q and k give the same codes, so the backward rebuilds the
 * forward's scores), and the kernel the scores ran on, recorded under `L<l>.attn`.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { ATTN_SCORE_PATH, quantizeHeadsI8 } from '../kernels/attention-i8';
import type { GemmPath } from './compute-plan';
import type { ModelDims } from './dims';

export interface ScoreCodes { qc: GPUBuffer; qs: GPUBuffer; kc: GPUBuffer; ks: GPUBuffer }

export function scoreCodes(rt: Runtime, b: (key: string) => GPUBuffer, l: number, q: Binding, k: Binding, d: ModelDims,
  paths: Map<string, GemmPath>): { dispatches: Dispatch[]; codes: ScoreCodes } {
  const codes = { qc: b('i8.qc'), qs: b('i8.qs'), kc: b('i8.kc'), ks: b('i8.ks') };
  paths.set(`L${l}.attn`, ATTN_SCORE_PATH);
  return {
    dispatches: [
      ...quantizeHeadsI8(rt, `L${l}.attn.qc`, q, d.N * d.nH, d.D, codes.qc, codes.qs),
      ...quantizeHeadsI8(rt, `L${l}.attn.kc`, k, d.N * d.nKV, d.D, codes.kc, codes.ks),
    ],
    codes,
  };
}
