/**
 * Reference for the quantize / dequantize kernels (./quantize.ts). The quantizers' specification lives
 * in src/engine/quant/ (pure TS, no GPU): it computes in exact fp32 steps rather than float64, because
 * the kernels must reproduce its codes bit for bit, not approximately.
 */
export { computeScales, dequantizeRef, quantizeRef } from '../../quant/quantizer';
