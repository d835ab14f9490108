/**
 * Causal grouped-query attention, plain TS float64 reference (the specification of the GPU kernels).
 *
 * Shapes: B batch, T sequence length, nH query heads, nKV key/value heads, G = nH/nKV query heads
 * per KV head, D head dim.
 * q, o, dO, dq: [B, T, nH, D]; k, v, dk, dv: [B, T, nKV, D]; lse: [B, nH, T].
 * Query head h reads KV head floor(h / G); scores are scaled by 1/sqrt(D); key j is visible to
 * query t iff j <= t. lse[b,h,t] = log Σ_j exp(s_tj) is all the backward needs to rebuild P.
 */
import { roundBf16 } from '../bf16/bf16.ref';

export function attentionForwardRef(
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>,
  B: number, T: number, nH: number, nKV: number, D: number,
): { o: Float64Array; lse: Float64Array } {
  const G = nH / nKV;
  const scale = 1 / Math.sqrt(D);
  const o = new Float64Array(B * T * nH * D);
  const lse = new Float64Array(B * nH * T);
  const s = new Float64Array(T);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < nH; h++) {
      const g = Math.floor(h / G);
      for (let t = 0; t < T; t++) {
        const qo = ((b * T + t) * nH + h) * D;
        let m = -Infinity;
        for (let j = 0; j <= t; j++) {
          const ko = ((b * T + j) * nKV + g) * D;
          let acc = 0;
          for (let d = 0; d < D; d++) acc += q[qo + d] * k[ko + d];
          s[j] = acc * scale;
          m = Math.max(m, s[j]);
        }
        let l = 0;
        for (let j = 0; j <= t; j++) {
          s[j] = Math.exp(s[j] - m);
          l += s[j];
        }
        for (let j = 0; j <= t; j++) {
          const vo = ((b * T + j) * nKV + g) * D;
          const pj = s[j] / l;
          for (let d = 0; d < D; d++) o[qo + d] += pj * v[vo + d];
        }
        lse[(b * nH + h) * T + t] = m + Math.log(l);
      }
    }
  }
  return { o, lse };
}

/**
 * Gradients from the saved (o, lse) exactly as the GPU backward does it: P = exp(s − lse),
 * Di = rowsum(dO∘O), dS = P∘(dP − Di) with dP = dO·Vᵀ; dq = scale·dS·K, dk = scale·dSᵀ·Q summed
 * over the G query heads sharing a KV head, dv = Pᵀ·dO likewise.
 */
export interface AttentionRefInputs {
  q: ArrayLike<number>; k: ArrayLike<number>; v: ArrayLike<number>; o: ArrayLike<number>;
  lse: ArrayLike<number>; dO: ArrayLike<number>;
  B: number; T: number; nH: number; nKV: number; D: number;
  /** The operands of the scores where they differ from q and k (INT8 scores: the dequantized codes). */
  scores?: { q: ArrayLike<number>; k: ArrayLike<number> };
  /** The operands of dP = dO·Vᵀ where they differ from dO and v (INT8 dP: the dequantized codes); Di and dV keep dO. */
  dp?: { dO: ArrayLike<number>; v: ArrayLike<number> };
}

/**
 * The backward's per-score quantities of query head h of batch row b: for every query t and visible
 * key j ≤ t, P = exp(s·scale − lse) and dS = P∘(dP − Di) with Di = rowsum(dO∘O), in float64; qo and
 * ko are the rows' offsets into q/o/dO and k/v. The one definition both backward references use.
 */
export function forEachScoreRef(a: AttentionRefInputs, b: number, h: number,
  f: (t: number, j: number, p: number, ds: number, qo: number, ko: number) => void): void {
  const { o, lse, dO, T, nH, nKV, D } = a;
  const { q, k } = a.scores ?? a;
  const dpOps = a.dp ?? a;
  const g = Math.floor(h / (nH / nKV));
  const scale = 1 / Math.sqrt(D);
  for (let t = 0; t < T; t++) {
    const qo = ((b * T + t) * nH + h) * D;
    const L = lse[(b * nH + h) * T + t];
    let di = 0;
    for (let d = 0; d < D; d++) di += dO[qo + d] * o[qo + d];
    for (let j = 0; j <= t; j++) {
      const ko = ((b * T + j) * nKV + g) * D;
      let sc = 0;
      let dp = 0;
      for (let d = 0; d < D; d++) {
        sc += q[qo + d] * k[ko + d];
        dp += dpOps.dO[qo + d] * dpOps.v[ko + d];
      }
      const p = Math.exp(sc * scale - L);
      f(t, j, p, p * (dp - di), qo, ko);
    }
  }
}

export function attentionBackwardRef(
  q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, o: ArrayLike<number>,
  lse: ArrayLike<number>, dO: ArrayLike<number>,
  B: number, T: number, nH: number, nKV: number, D: number, scores?: AttentionRefInputs['scores'],
  dp?: AttentionRefInputs['dp'],
  /** 'bf16': dq from dS rounded to fp32 then bf16 (the INT8-dP backward stores dS so); dK keeps it exact. */
  dqDs?: 'bf16',
): { dq: Float64Array; dk: Float64Array; dv: Float64Array } {
  const scale = 1 / Math.sqrt(D);
  const dq = new Float64Array(B * T * nH * D);
  const dk = new Float64Array(B * T * nKV * D);
  const dv = new Float64Array(B * T * nKV * D);
  const a = { q, k, v, o, lse, dO, B, T, nH, nKV, D, scores, dp };
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < nH; h++) {
      forEachScoreRef(a, b, h, (_t, _j, p, ds, qo, ko) => {
        const dsq = dqDs ? roundBf16(ds) : ds;
        for (let d = 0; d < D; d++) {
          dq[qo + d] += scale * dsq * k[ko + d];
          dk[ko + d] += scale * ds * q[qo + d];
          dv[ko + d] += p * dO[qo + d];
        }
      });
    }
  }
  return { dq, dk, dv };
}
