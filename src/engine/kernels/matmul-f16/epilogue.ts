/**
 * The f16 GEMMs' low-rank epilogue (the fp32 GEMM's is matmul.wgsl LOW_RANK): C (+)= alpha·op(A)·op(B)
 * + s·Uᵀ·op(V), U [rank, M] and V [rank, N] (or [N, rank], transV) in f32 storage, s in the
 * Params' eighth (last) word, whatever the kernel names it. LoRA's y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ and dX = dY·W + s·(dY·B)·A in the base GEMM's one
 * pass. Both kernels (SIMT, tensor cores) write each output element once, masked, in their last
 * loop: they add lowRank(row, col) there, except where the tensor-core kernel multiplies f16 copies of
 * U and s·V into its accumulators (tc.ts tcLr: alpha 1), reading V through lrV(i). Text shared by
 * both generators, bindings 4 and 5.
 */
export interface F16LowRankCode {
  rank: number;
  transV: boolean;
}

/** Declarations and lowRank(row, col); `scaleField`: the kernel's name for the Params' last word (the scale, as bits). */
export function f16LowRankWgsl(lr: F16LowRankCode, scaleField: string): string {
  const head = `@group(0) @binding(4) var<storage, read> LRU: array<f32>; // U [${lr.rank}, M]
// s·Σ_j U[j, row]·V[j, col] (row < M, col < N): the low-rank term of one output element.`;
  const tail = `  return bitcast<f32>(P.${scaleField}) * t;
}
`;
  if (lr.transV && lr.rank % 4 === 0) {
    // V [N, r]: a row's r values as vec4s (lanes of a tile row read columns r floats apart: a
    // quarter of the scalar loads); the same fma chain in j order as the scalar loop.
    const q = lr.rank / 4;
    return `@group(0) @binding(5) var<storage, read> LRV: array<vec4<f32>>; // V [N, ${lr.rank}]
fn lrV(i: u32) -> f32 { return LRV[i / 4u][i % 4u]; } // V's element i as stored (tensor-core staging)
${head}
fn lowRank(row: u32, col: u32) -> f32 {
  var t = 0.0;
  for (var j = 0u; j < ${q}u; j++) {
    let v = LRV[col * ${q}u + j];
    let u = 4u * j * P.M + row;
    t = fma(LRU[u], v.x, t); t = fma(LRU[u + P.M], v.y, t); t = fma(LRU[u + 2u * P.M], v.z, t); t = fma(LRU[u + 3u * P.M], v.w, t);
  }
${tail}`;
  }
  const vAt = lr.transV ? `col * ${lr.rank}u + j` : 'j * P.N + col';
  return `@group(0) @binding(5) var<storage, read> LRV: array<f32>; // V ${lr.transV ? `[N, ${lr.rank}]` : `[${lr.rank}, N]`}
fn lrV(i: u32) -> f32 { return LRV[i]; }
${head}
fn lowRank(row: u32, col: u32) -> f32 {
  var t = 0.0;
  for (var j = 0u; j < ${lr.rank}u; j++) { t = fma(LRU[j * P.M + row], LRV[${vAt}], t); }
${tail}`;
}
