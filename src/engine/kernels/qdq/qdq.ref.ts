/**
 * Reference for the fused fake-quantization kernel (./qdq.ts): quantizeRef then dequantizeRef, the
 * quantizers' TS specification. It returns fp32 values (not float64) because the kernel must match
 * it bit for bit: every step of the spec is an exactly rounded fp32 operation.
 */
import { dequantizeRef, type Granularity, quantizeRef } from '../../quant/quantizer';
import type { QuantSpec } from '../../scheme/scheme';

/** The quantizer granularity a QuantSpec names (row / column need the row length). */
export function specGranularity(spec: QuantSpec, rowLength?: number): Granularity {
  switch (spec.granularity) {
    case 'tensor':
      return { kind: 'tensor' };
    case 'group':
      return { kind: 'group', size: spec.group };
    case 'row':
    case 'column':
      if (rowLength === undefined) throw new Error(`qdq: ${spec.granularity} granularity needs rowLength`);
      return { kind: spec.granularity, rowLength };
  }
}

/** x̂ for the first n elements of x under `spec` (fp32: x rounded to fp32, unchanged). */
export function qdqRef(x: ArrayLike<number>, n: number, spec: QuantSpec, rowLength?: number, seed = 0): Float32Array {
  const xs = Float32Array.from({ length: n }, (_, i) => x[i]);
  if (spec.format === 'fp32') return xs;
  const q = quantizeRef(xs, spec.format, specGranularity(spec, rowLength), { rounding: spec.rounding, seed });
  return dequantizeRef(q);
}
