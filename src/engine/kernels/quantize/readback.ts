/**
 * Host round trips through the GPU quantizer: upload, quantize or dequantize, read back. What the
 * parity tests and the codec probes compare against the reference; a run keeps its codes on the GPU.
 */
import type { Runtime } from '../../gpu/runtime';
import type { QuantFormat } from '../../quant/formats';
import type { Granularity, QuantizeOptions, Quantized } from '../../quant/quantizer';
import { buildDequantize, buildQuantize } from './quantize';

/** One-shot convenience: upload x, quantize on the GPU, read back a `Quantized`. */
export async function quantizeGpu(
  rt: Runtime,
  x: Float32Array,
  format: QuantFormat,
  granularity: Granularity,
  opts: QuantizeOptions = {},
): Promise<Quantized> {
  const xb = rt.upload('workspace', 'quantize.x', x.length ? x : new Float32Array(1));
  const k = buildQuantize(rt, { format, granularity, n: x.length }, xb, opts);
  try {
    rt.run(k.dispatches);
    const words = await rt.readU32(k.words, 0, k.numWords);
    const scales = await rt.readF32(k.scales, 0, k.numScales);
    return { format, granularity, n: x.length, words, scales };
  } finally {
    k.destroy();
    rt.mem.free(xb);
  }
}

/** One-shot convenience: dequantize a `Quantized` on the GPU. */
export async function dequantizeGpu(rt: Runtime, q: Quantized): Promise<Float32Array> {
  const wb = rt.upload('workspace', 'dequantize.words', q.words.length ? q.words : new Uint32Array(1));
  const sb = rt.upload('workspace', 'dequantize.scales', q.scales.length ? q.scales : new Float32Array(1));
  const k = buildDequantize(rt, { format: q.format, granularity: q.granularity, n: q.n }, wb, sb);
  try {
    rt.run(k.dispatches);
    return await rt.readF32(k.out, 0, q.n);
  } finally {
    k.destroy();
    rt.mem.free(wb);
    rt.mem.free(sb);
  }
}
