// INT8 × INT8 GEMM with dot4I8Packed, dequantized in the epilogue:
//   C[m, n] = sx[m] · sw[n] · Σ_k qx[m, k] · qw[n, k]
//   M = rows of X and C (tokens), N = rows of W = output channels, K = reduction length,
//   KW = K/4 packed words per row. X [M, K] and W [N, K] (HF [out, in]) are both K-contiguous
//   int8 rows, 4 per u32 (byte j of word w is element 4w + j, two's complement), so one word of
//   each feeds one dot4I8Packed. sx: per-row (per-token) scales, sw: per-output-channel scales.
// Accumulation is exact in i32 while K·128·128 < 2^31 (K ≤ 131 071); the i32 → f32 conversion is
// exact below 2^24 and the epilogue's two products are the only other roundings.
//
// Split-K (src/engine/kernels/qgemm-splitk.ts): workgroup z runs words [z·KC, min(KW, (z+1)·KC))
// of K (one pass: KC = KW, z = 0); with PART it writes the raw i32 sums to PARTS [S, M, N]
// instead of dequantizing, and src/engine/kernels/qgemm/splitk.wgsl adds them up and dequantizes.
//
// Block tile BM×BN, BKW words deep; each thread owns TM×TN outputs (TM, TN ∈ {4, 8}) as TM·TN/4
// vec4<i32> accumulators. Its rows are ty*4 + g*(BM*4/TM) + {0..3}, its columns likewise, so a
// warp's vec4 reads of a k-row of the tiles are distinct consecutive words or broadcasts. Tiles
// sit k-major in workgroup memory (rows padded by 4 words so the transposing stores spread over
// banks). Partial tiles read zeros, which add nothing to the dot products.

override BM: u32 = 64u;
override BN: u32 = 64u;
override BKW: u32 = 8u;
override TM: u32 = 4u;
override TN: u32 = 4u;
// 1: C += the product (a residual or a gradient the model accumulates), 0: C = the product.
override ACC: u32 = 0u;
override WG: u32 = (BM / TM) * (BN / TN);
override BMP: u32 = BM + 4u;
override BNP: u32 = BN + 4u;
override XS_LEN: u32 = BKW * BMP / 4u;
override WS_LEN: u32 = BKW * BNP / 4u;

// KC: words of K per slice (workgroup z). one = 1.0 at run time: C + y·one is RN(C + y) whether or
// not the compiler fuses that multiply with the add (y's own products stay rounded), as the reference.
struct Params { M: u32, N: u32, KW: u32, KC: u32, one: f32 }

// #if PART
@group(0) @binding(0) var<storage, read> XQ: array<u32>;
@group(0) @binding(1) var<storage, read> WQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> PARTS: array<i32>;
@group(0) @binding(3) var<uniform> P: Params;
// #else
@group(0) @binding(0) var<storage, read> XQ: array<u32>;
@group(0) @binding(1) var<storage, read> SX: array<f32>;
@group(0) @binding(2) var<storage, read> WQ: array<u32>;
@group(0) @binding(3) var<storage, read> SW: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;
@group(0) @binding(5) var<uniform> P: Params;
// #endif

var<workgroup> Xs: array<vec4<u32>, XS_LEN>;
var<workgroup> Ws: array<vec4<u32>, WS_LEN>;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let M = P.M;
  let N = P.N;
  let KW = P.KW;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let tx = lid % (BN / TN);
  let ty = lid / (BN / TN);
  let kb = wid.z * P.KC;
  let ke = min(KW, kb + P.KC);

  var acc: array<vec4<i32>, 16>;   // TM*TN/4 used
  for (var k0 = kb; k0 < ke; k0 += BKW) {
    // Coalesced loads: consecutive threads take consecutive words of a row.
    for (var l = lid; l < BM * BKW; l += WG) {
      let r = l / BKW;
      let c = l % BKW;
      var w = 0u;
      if (m0 + r < M && k0 + c < ke) { w = XQ[(m0 + r) * KW + k0 + c]; }
      let f = c * BMP + r;
      Xs[f / 4u][f % 4u] = w;
    }
    for (var l = lid; l < BN * BKW; l += WG) {
      let r = l / BKW;
      let c = l % BKW;
      var w = 0u;
      if (n0 + r < N && k0 + c < ke) { w = WQ[(n0 + r) * KW + k0 + c]; }
      let f = c * BNP + r;
      Ws[f / 4u][f % 4u] = w;
    }
    workgroupBarrier();
    for (var k = 0u; k < BKW; k++) {
      var a: array<vec4<u32>, 2>;
      var b: array<vec4<u32>, 2>;
      for (var g = 0u; g < TM / 4u; g++) { a[g] = Xs[k * (BMP / 4u) + g * (BM / TM) + ty]; }
      for (var h = 0u; h < TN / 4u; h++) { b[h] = Ws[k * (BNP / 4u) + h * (BN / TN) + tx]; }
      for (var i = 0u; i < TM; i++) {
        let av = a[i / 4u][i % 4u];
        for (var h = 0u; h < TN / 4u; h++) {
          let bv = b[h];
          acc[i * (TN / 4u) + h] += vec4<i32>(dot4I8Packed(av, bv.x), dot4I8Packed(av, bv.y),
                                              dot4I8Packed(av, bv.z), dot4I8Packed(av, bv.w));
        }
      }
    }
    workgroupBarrier();
  }

  for (var g = 0u; g < TM / 4u; g++) {
    for (var e = 0u; e < 4u; e++) {
      let row = m0 + g * (BM * 4u / TM) + ty * 4u + e;
      if (row >= M) { continue; }
// #if PART
// #else
      let sx = SX[row];
// #endif
      for (var h = 0u; h < TN / 4u; h++) {
        let v = acc[(g * 4u + e) * (TN / 4u) + h];
        for (var c = 0u; c < 4u; c++) {
          let col = n0 + h * (BN * 4u / TN) + tx * 4u + c;
          if (col < N) {
// #if PART
            PARTS[(wid.z * M + row) * N + col] = v[c];
// #else
            let y = f32(v[c]) * sx * SW[col];
            C[row * N + col] = select(y, C[row * N + col] + y * P.one, ACC != 0u);
// #endif
          }
        }
      }
    }
  }
}
