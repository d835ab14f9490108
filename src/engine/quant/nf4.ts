/**
 * NF4, QLoRA's 4-bit NormalFloat (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized
 * LLMs", arXiv:2305.14314, Appendix E): 16 values at quantiles of N(0, 1) normalised to [−1, 1],
 * with an exact zero. Used with absmax scaling per block (QMAX = 1: v = x / absmax ∈ [−1, 1]).
 * The table is bitsandbytes' `nf4_data` (csrc/kernels.cu), every value an exact fp32; code 7 is 0.
 * Encoding is to the nearest value: code = #{thresholds t_i < v} with t_i = fp32((a_i + a_{i+1}) / 2),
 * the thresholds of bitsandbytes' dQuantizeNF4 decision tree (a tie goes to the lower code, as there).
 * (bitsandbytes scales by x·(1/absmax); the project's quantizers use the correctly rounded x / s.)
 * WGSL twin: nf4_encode / nf4_decode in shaders/quant/codec.wgsl.
 */

export const NF4_TABLE: readonly number[] = [
  -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635, -0.18477343022823334,
  -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
  0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
];

/** The code of 0.0 (what zero-scale groups and non-finite inputs get). */
export const NF4_ZERO = 7;

/** fp32 midpoints of neighbouring table values (15): the encoder's thresholds. */
export const NF4_THRESHOLDS: readonly number[] = NF4_TABLE.slice(0, 15).map((a, i) => Math.fround((a + NF4_TABLE[i + 1]) / 2));

/** Nearest NF4 code of an already-scaled fp32 value v (non-finite: the zero code). */
export function encodeNf4(v: number): number {
  if (!Number.isFinite(v)) return NF4_ZERO;
  let c = 0;
  for (const t of NF4_THRESHOLDS) if (v > t) c++;
  return c;
}

export function decodeNf4(code: number): number {
  return NF4_TABLE[code & 0xf];
}
