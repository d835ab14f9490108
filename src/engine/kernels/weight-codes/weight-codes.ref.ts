/**
 * Reference for ./weight-codes.ts: each entry is quantizeRef of its tensor (per row of W, or per
 * row of Wᵀ = per column of W), its words and scales placed at the entry's byte offsets.
 */
import { quantizeRef } from '../../quant/quantizer';
import { transposeRef } from '../qgemm/block.ref';
import type { ColCodesEntry, RowCodesEntry } from './weight-codes';

/** Codes (as u32 words) and scales of every entry, in buffers of `codeBytes` and `scaleBytes` (zero elsewhere). */
export function weightCodesRef(x: Float32Array, form: { rows: readonly RowCodesEntry[] } | { cols: readonly ColCodesEntry[] },
  codeBytes: number, scaleBytes: number): { codes: Uint32Array; scales: Float32Array } {
  const codes = new Uint32Array(codeBytes / 4);
  const scales = new Float32Array(scaleBytes / 4);
  const put = (e: { q: number; s: number }, m: Float32Array, rowLength: number) => {
    const q = quantizeRef(m, 'int8', { kind: 'row', rowLength });
    codes.set(q.words, e.q / 4);
    scales.set(q.scales, e.s / 4);
  };
  if ('rows' in form) for (const e of form.rows) put(e, x.subarray(e.x, e.x + e.rows * e.rowLength), e.rowLength);
  else for (const e of form.cols) put(e, transposeRef(x.subarray(e.x, e.x + e.R * e.CN), e.R, e.CN), e.R);
  return { codes, scales };
}
