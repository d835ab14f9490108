/**
 * Folds LoRA adapters into their base weights, as PEFT's merge_and_unload does:
 *   W' = W + (alpha / r) · B · A        W [out, in], B [out, r], A [r, in]
 * so the existing HF checkpoint export writes a full model that runs without PEFT.
 */
import { type ModelConfig, paramSpecs } from '../model/config';
import { loraAdapters, loraScale, LoraSpecSchema, type LoraSpec } from './spec';

const fmt = (s: readonly number[]) => `[${s.join(', ')}]`;

/**
 * A new params map: the adapted weights are new arrays, every other entry is the base's own array
 * (shared, not copied). Each merged element is W + s·Σ_k B[o,k]·A[k,i], the sum in float64 (PEFT
 * forms B·A, scales it, then adds) and rounded to f32 once.
 */
export function mergeLora(c: ModelConfig, spec: LoraSpec, base: Map<string, Float32Array>, adapters: Map<string, Float32Array>): Map<string, Float32Array> {
  const s = LoraSpecSchema.parse(spec);
  const list = loraAdapters(c, s);
  const shapes = new Map(paramSpecs(c).map((p) => [p.name, p.shape]));
  const problems: string[] = [];
  for (const a of list) {
    const w = base.get(a.base);
    if (!w) problems.push(`base has no ${a.base} ${fmt(shapes.get(a.base)!)}`);
    else if (w.length !== a.out * a.in) problems.push(`base ${a.base}: ${w.length} elements, want ${fmt([a.out, a.in])}`);
    const A = adapters.get(a.a);
    const B = adapters.get(a.b);
    if (!A) problems.push(`adapters have no ${a.a} ${fmt([s.rank, a.in])}`);
    else if (A.length !== s.rank * a.in) problems.push(`${a.a}: ${A.length} elements, want ${fmt([s.rank, a.in])}`);
    if (!B) problems.push(`adapters have no ${a.b} ${fmt([a.out, s.rank])}`);
    else if (B.length !== a.out * s.rank) problems.push(`${a.b}: ${B.length} elements, want ${fmt([a.out, s.rank])}`);
  }
  const names = new Set(list.flatMap((a) => [a.a, a.b]));
  const extra = [...adapters.keys()].filter((n) => !names.has(n));
  if (extra.length) problems.push(`adapters the spec does not have: ${extra.join(', ')}`);
  if (problems.length) throw new Error(`cannot merge the LoRA adapters:\n  ${problems.join('\n  ')}`);

  const out = new Map(base);
  const scale = loraScale(s);
  for (const a of list) out.set(a.base, mergeOne(base.get(a.base)!, adapters.get(a.a)!, adapters.get(a.b)!, a.out, a.in, s.rank, scale));
  return out;
}

/**
 * One weight, O(out·in·r): blocks of 4 output rows × 4 rank components, each A element loaded once
 * per block and used for 4 rows (float64 row accumulators), walking A's rows contiguously. About 1.7×
 * faster than one row at a time in V8; leftover rows and components take the one-row path.
 */
export function mergeOne(w: Float32Array, A: Float32Array, B: Float32Array, nOut: number, nIn: number, r: number, scale: number): Float32Array {
  const out = new Float32Array(nOut * nIn);
  // A widened once: V8's inner loop runs about twice as fast on float64 loads as on float32 ones.
  const A64 = Float64Array.from(A);
  const accs = [0, 1, 2, 3].map(() => new Float64Array(nIn));
  const [acc0, acc1, acc2, acc3] = accs;
  let o = 0;
  for (; o + 4 <= nOut; o += 4) {
    for (const acc of accs) acc.fill(0);
    let k = 0;
    for (; k + 4 <= r; k += 4) {
      const q0 = o * r + k, q1 = q0 + r, q2 = q1 + r, q3 = q2 + r;
      const b00 = B[q0], b01 = B[q0 + 1], b02 = B[q0 + 2], b03 = B[q0 + 3];
      const b10 = B[q1], b11 = B[q1 + 1], b12 = B[q1 + 2], b13 = B[q1 + 3];
      const b20 = B[q2], b21 = B[q2 + 1], b22 = B[q2 + 2], b23 = B[q2 + 3];
      const b30 = B[q3], b31 = B[q3 + 1], b32 = B[q3 + 2], b33 = B[q3 + 3];
      const p0 = k * nIn, p1 = p0 + nIn, p2 = p1 + nIn, p3 = p2 + nIn;
      for (let i = 0; i < nIn; i++) {
        const a0 = A64[p0 + i], a1 = A64[p1 + i], a2 = A64[p2 + i], a3 = A64[p3 + i];
        acc0[i] += b00 * a0 + b01 * a1 + b02 * a2 + b03 * a3;
        acc1[i] += b10 * a0 + b11 * a1 + b12 * a2 + b13 * a3;
        acc2[i] += b20 * a0 + b21 * a1 + b22 * a2 + b23 * a3;
        acc3[i] += b30 * a0 + b31 * a1 + b32 * a2 + b33 * a3;
      }
    }
    for (let j = 0; j < 4; j++) {
      accumulateRow(accs[j], A64, B, o + j, nIn, r, k);
      storeRow(out, w, accs[j], o + j, nIn, scale);
    }
  }
  for (; o < nOut; o++) {
    acc0.fill(0);
    accumulateRow(acc0, A64, B, o, nIn, r, 0);
    storeRow(out, w, acc0, o, nIn, scale);
  }
  return out;
}

/** acc += Σ_{k ≥ k0} B[o,k]·A[k,:]. */
function accumulateRow(acc: Float64Array, A64: Float64Array, B: Float32Array, o: number, nIn: number, r: number, k0: number): void {
  for (let k = k0; k < r; k++) {
    const b = B[o * r + k];
    const p = k * nIn;
    for (let i = 0; i < nIn; i++) acc[i] += b * A64[p + i];
  }
}

function storeRow(out: Float32Array, w: Float32Array, acc: Float64Array, o: number, nIn: number, scale: number): void {
  const row = o * nIn;
  for (let i = 0; i < nIn; i++) out[row + i] = w[row + i] + scale * acc[i];
}
