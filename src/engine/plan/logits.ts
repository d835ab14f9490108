/**
 * How many token rows of logits exist at once (RunPlan.logitsRows): the LM head, its cross-entropy
 * and, in training, its backward run over chunks of that many rows (model/lm-head.ts), so the logits
 * buffer is [rows, V] instead of [N, V]. Resolved once with the rest of the plan (run-plan.ts).
 */
import type { ModelDims } from '../model/dims';
import { type ActivationStorage, storedRowsAligned } from '../model/plan';

/**
 * The most bytes of logits one chunk holds, 64 MiB. Where the whole [N, V] buffer is no larger it is
 * one chunk, the head exactly as unchunked (char-level micro/small: V = 65 stays whole up to 258k
 * tokens). Where it is larger (SmolLM2's V = 49,152 at B8×T512: 805 MB) the chunks stay under it:
 * a chunk of 64 MiB is ≥ 16.7M outputs, over a thousand 128×128 tiles, several waves on the largest
 * GPU, so the chunks' GEMMs run at the whole GEMM's rate and chunking adds ~5 dispatches a chunk
 * (full training also re-reads the head's dW [V, C] once per chunk to accumulate it). It also keeps
 * the binding under WebGPU's default maxStorageBufferBindingSize (128 MiB).
 */
export const LOGITS_CHUNK_BYTES = 64 * 2 ** 20;

/** Rows [row0, row0 + rows) of the N, one chunk each: the last one shorter when `rows` does not divide N. */
export function logitsChunks(N: number, rows: number): { row0: number; rows: number }[] {
  const out: { row0: number; rows: number }[] = [];
  for (let r0 = 0; r0 < N; r0 += rows) out.push({ row0: r0, rows: Math.min(rows, N - r0) });
  return out;
}

/**
 * Rows per chunk: the whole N where N·V·4 ≤ LOGITS_CHUNK_BYTES, else the largest divisor of N that
 * fits, is aligned and is at least half the fitting rows (chunks of one GEMM shape); failing that,
 * the largest aligned count that fits, with a shorter last chunk. Aligned: a chunk's rows of hF and
 * dX ([N, C] fp32) start at 256-byte offsets (WebGPU's binding offset alignment), and so do its codes
 * and scales where the backward dequantizes hF's stored rows per chunk (`hF`: hF's storage when the
 * head's dW reads it back, i.e. training a head whose input is stored quantized or bf16).
 * `force` (tests): these rows, checked.
 */
export function logitsChunkRows(d: ModelDims, hF: ActivationStorage | undefined, force?: number): number {
  const aligned = (r: number) => {
    if ((r * d.C * 4) % 256 !== 0) return false;
    if (!hF) return true;
    return storedRowsAligned(hF, d.C, r);
  };
  if (force !== undefined) {
    if (!(Number.isInteger(force) && force >= 1 && force <= d.N)) throw new Error(`logits chunk rows ${force}: expected an integer in [1, ${d.N}] (the batch's tokens)`);
    if (force !== d.N && !aligned(force)) {
      throw new Error(`logits chunk rows ${force}: a chunk's rows of the head's input (${d.C} floats a row${hF ? `, stored ${hF.format}` : ''}) would not start at 256-byte offsets; pick a multiple that aligns, or ${d.N}`);
    }
    return force;
  }
  const fit = Math.max(1, Math.floor(LOGITS_CHUNK_BYTES / (d.V * 4)));
  if (d.N <= fit) return d.N;
  for (let r = fit; r >= Math.ceil(fit / 2); r--) if (d.N % r === 0 && aligned(r)) return r;
  for (let r = fit; r >= 1; r--) if (aligned(r)) return r;
  return d.N;
}
