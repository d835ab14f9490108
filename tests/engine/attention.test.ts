import { describe, expect, it } from 'vitest';
import { attentionBackwardRef, attentionForwardRef } from '../../src/engine/kernels/attention/attention.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';

describe('attention reference', () => {
  it('T = 1: o is v, lse is the single scaled score', () => {
    const D = 4;
    const q = [1, 2, 0, -1, 0.5, 0, 0, 1];   // two query heads
    const k = [0.5, 1, 2, 1];
    const v = [3, -1, 2, 7];
    const { o, lse } = attentionForwardRef(q, k, v, 1, 1, 2, 1, D);
    expectClose(o, [...v, ...v], { atol: 1e-15, label: 'o' });
    expectClose(lse, [(0.5 + 2 + 0 - 1) / 2, (0.25 + 1) / 2], { atol: 1e-15, label: 'lse' });
  });

  it('matches an explicit softmax over the causal prefix, with query head h reading KV head h / G', () => {
    const rng = new Rng(3);
    const [B, T, nH, nKV, D] = [2, 5, 4, 2, 6];
    const q = rng.normalArray(B * T * nH * D);
    const k = rng.normalArray(B * T * nKV * D);
    const v = rng.normalArray(B * T * nKV * D);
    const { o, lse } = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
    const b = 1, h = 3, t = 3, g = 1;   // h = 3 uses KV head floor(3 / 2) = 1
    const s: number[] = [];
    for (let j = 0; j <= t; j++) {
      let dot = 0;
      for (let d = 0; d < D; d++) dot += q[((b * T + t) * nH + h) * D + d] * k[((b * T + j) * nKV + g) * D + d];
      s.push(dot / Math.sqrt(D));
    }
    const z = s.reduce((a, x) => a + Math.exp(x), 0);
    expect(lse[(b * nH + h) * T + t]).toBeCloseTo(Math.log(z), 12);
    for (let d = 0; d < D; d++) {
      let want = 0;
      for (let j = 0; j <= t; j++) want += (Math.exp(s[j]) / z) * v[((b * T + j) * nKV + g) * D + d];
      expect(o[((b * T + t) * nH + h) * D + d]).toBeCloseTo(want, 12);
    }
  });

  it('is causal: changing a later key or value leaves earlier outputs unchanged', () => {
    const rng = new Rng(4);
    const [B, T, nH, nKV, D] = [1, 4, 2, 1, 4];
    const q = rng.normalArray(B * T * nH * D);
    const k = rng.normalArray(B * T * nKV * D);
    const v = rng.normalArray(B * T * nKV * D);
    const a = attentionForwardRef(q, k, v, B, T, nH, nKV, D).o;
    k[3 * D] += 5;
    v[3 * D + 1] -= 5;
    const b = attentionForwardRef(q, k, v, B, T, nH, nKV, D).o;
    expectClose(b.slice(0, 3 * nH * D), a.slice(0, 3 * nH * D), { atol: 0, rtol: 0, label: 't < 3' });
    expect(Math.abs(b[3 * nH * D] - a[3 * nH * D])).toBeGreaterThan(1e-6);
  });

  it('GQA equals multi-head attention with each KV head repeated G times', () => {
    const rng = new Rng(5);
    const [B, T, nH, nKV, D] = [1, 3, 4, 2, 2];
    const G = nH / nKV;
    const q = rng.normalArray(B * T * nH * D);
    const k = rng.normalArray(B * T * nKV * D);
    const v = rng.normalArray(B * T * nKV * D);
    const rep = (x: Float32Array) => {
      const r = new Float32Array(B * T * nH * D);
      for (let t = 0; t < T; t++) for (let h = 0; h < nH; h++) for (let d = 0; d < D; d++) {
        r[(t * nH + h) * D + d] = x[(t * nKV + Math.floor(h / G)) * D + d];
      }
      return r;
    };
    const gqa = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
    const mha = attentionForwardRef(q, rep(k), rep(v), B, T, nH, nH, D);
    expectClose(gqa.o, mha.o, { atol: 1e-14, label: 'o' });
    expectClose(gqa.lse, mha.lse, { atol: 1e-14, label: 'lse' });
  });

  it('backward matches central finite differences of sum(w ∘ o) in float64', () => {
    const rng = new Rng(6);
    const [B, T, nH, nKV, D] = [2, 4, 4, 2, 4];
    const nq = B * T * nH * D;
    const nk = B * T * nKV * D;
    const q = Float64Array.from(rng.normalArray(nq));
    const k = Float64Array.from(rng.normalArray(nk));
    const v = Float64Array.from(rng.normalArray(nk));
    const w = Float64Array.from(rng.normalArray(nq));
    const loss = () => {
      const { o } = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
      let l = 0;
      for (let i = 0; i < nq; i++) l += w[i] * o[i];
      return l;
    };
    const { o, lse } = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
    const g = attentionBackwardRef(q, k, v, o, lse, w, B, T, nH, nKV, D);
    const eps = 1e-5;
    for (const [name, x, grad] of [['q', q, g.dq], ['k', k, g.dk], ['v', v, g.dv]] as const) {
      const fd = new Float64Array(x.length);
      for (let i = 0; i < x.length; i++) {
        const x0 = x[i];
        x[i] = x0 + eps;
        const lp = loss();
        x[i] = x0 - eps;
        const lm = loss();
        x[i] = x0;
        fd[i] = (lp - lm) / (2 * eps);
      }
      expectClose(grad, fd, { atol: 1e-7, rtol: 1e-6, label: `d${name}` });
    }
  });
});
