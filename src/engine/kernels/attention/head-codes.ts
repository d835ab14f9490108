/** The layout of the INT8 attention kernels' code buffers (attention-i8.ts), apart from their shaders (the plan sizes them). */
import type { BufSlice } from '../../gpu/runtime';

/**
 * A head-codes buffer: the INT8 codes of `rows` D-long (token, head) rows (D/4 words a row), then
 * their scales from byte scaleOffset = the codes rounded up to 256 bytes (a binding offset; the
 * shaders' scaleBase), so that a kernel reads both through one binding.
 */
export function headCodesLayout(rows: number, D: number): { scaleOffset: number; bytes: number } {
  const scaleOffset = Math.ceil((rows * D) / 4 / 64) * 256;
  return { scaleOffset, bytes: scaleOffset + Math.max(rows, 1) * 4 };
}

/** The codes and the scales of a head-codes buffer, as two bindings. */
export function headCodesSlices(buf: GPUBuffer, rows: number, D: number): { codes: BufSlice; scales: BufSlice } {
  const { scaleOffset } = headCodesLayout(rows, D);
  return { codes: { buffer: buf, offset: 0, size: Math.max(rows * D, 4) }, scales: { buffer: buf, offset: scaleOffset, size: Math.max(rows, 1) * 4 } };
}
