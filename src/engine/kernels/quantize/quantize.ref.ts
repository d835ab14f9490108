/**
 * Reference for the quantize / dequantize kernels (./quantize.ts). The quantizers' specification lives
 * in src/engine/quant/ (pure TS, no GPU): it computes in exact fp32 steps rather than float64, because
 * the kernels must reproduce its codes bit for bit, not approximately.
 */
import { roundF16Array } from '../../quant/f16';
import { dequantizeRef, type Quantized } from '../../quant/quantizer';

export { computeScales, dequantizeRef, quantizeRef } from '../../quant/quantizer';

/** The f16 dequantize (buildDequantize's `f16`): each value code × scale in f32, then rounded to nearest f16. */
export const dequantizeF16Ref = (q: Quantized): Float32Array => roundF16Array(dequantizeRef(q));
