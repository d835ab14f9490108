/**
 * The stored-dS backward path, plain TS float64 reference (attention-ds.ts, src/engine/kernels/attention/ds.wgsl
 * and attention-dq-ds.wgsl). Shapes and legend as attention.ref.ts.
 *
 * Layout of a chunk of (b, KV head) pairs pair0 .. pair0 + pairs − 1 (pair = b·nKV + g): head
 * (pair − pair0)·G + hh (query head h = g·G + hh) takes dsHeadFloats(T) floats; in it, row t (query t)
 * starts at float 4·dsRowStart(t) and holds keys 0 .. 4·ceil((t+1)/4) − 1; those past t are not
 * read (here 0; on the GPU 0 or unwritten).
 * dS[t, j] = P∘(dP − Di) exactly as attentionBackwardRef forms it (unscaled); dq = scale·Σ_j dS·K.
 */

import { forEachScoreRef } from './attention.ref';

/** vec4 index of row t in one head of the stored dS: Σ_{r<t} ceil((r+1)/4). */
export function dsRowStart(t: number): number {
  const a = Math.floor(t / 4);
  const c = t % 4;
  return 2 * a * (a + 1) + c * (a + 1);
}

/** Floats of one head's stored dS. */
export function dsHeadFloats(T: number): number {
  return 4 * dsRowStart(T);
}

/** The stored dS of a chunk of pairs (what the DS dK/dV pass writes). */
export function storedDsRef(
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, o: ArrayLike<number>,
  lse: ArrayLike<number>, dO: ArrayLike<number>,
  B: number, T: number, nH: number, nKV: number, D: number, pair0 = 0, pairs = B * nKV,
): Float64Array {
  const G = nH / nKV;
  const out = new Float64Array(pairs * G * dsHeadFloats(T));
  const a = { q, k, v, o, lse, dO, B, T, nH, nKV, D };
  for (let pr = pair0; pr < pair0 + pairs; pr++) {
    const b = Math.floor(pr / nKV);
    const g = pr % nKV;
    for (let hh = 0; hh < G; hh++) {
      const base = ((pr - pair0) * G + hh) * dsHeadFloats(T);
      forEachScoreRef(a, b, g * G + hh, (t, j, _p, ds) => {
        out[base + 4 * dsRowStart(t) + j] = ds;
      });
    }
  }
  return out;
}

/** dq rows of the chunk's query heads from their stored dS (written into dq [B, T, nH, D]). */
export function dqFromDsRef(
  dS: ArrayLike<number>, k: ArrayLike<number>, dq: Float64Array,
  B: number, T: number, nH: number, nKV: number, D: number, pair0 = 0, pairs = B * nKV,
): Float64Array {
  const G = nH / nKV;
  const scale = 1 / Math.sqrt(D);
  for (let head = 0; head < pairs * G; head++) {
    const bh = pair0 * G + head;
    const b = Math.floor(bh / nH);
    const h = bh % nH;
    const g = Math.floor(h / G);
    for (let t = 0; t < T; t++) {
      const qo = ((b * T + t) * nH + h) * D;
      const row = head * dsHeadFloats(T) + 4 * dsRowStart(t);
      for (let d = 0; d < D; d++) dq[qo + d] = 0;
      for (let j = 0; j <= t; j++) {
        const ko = ((b * T + j) * nKV + g) * D;
        for (let d = 0; d < D; d++) dq[qo + d] += scale * dS[row + j] * k[ko + d];
      }
    }
  }
  return dq;
}
