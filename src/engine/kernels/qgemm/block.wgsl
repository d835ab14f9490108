// INT8 × INT8 GEMM whose scales vary along the reduction: the weight gradient dW = dYᵀ·X, whose
// reduction runs over tokens, with both operands quantized per channel in blocks of G tokens
// (Jetfire-style; src/engine/kernels/qgemm/transpose-quant.wgsl writes them):
//   C[m, n] (+)= Σ_b (f32(Σ_{k ∈ block b} qa[m, k] · qb[n, k]) · sa[m, b]) · sb[n, b]
// A [M, K] and B [N, K] K-contiguous int8 rows packed four to a u32 (KW = K/4 words per row),
// sa [M, K/G], sb [N, K/G]. Each block's integer sum is exact (i32, dot4I8Packed); the blocks are
// summed in f32 in block order: the tile loop steps BKW words, and every GW = G/4 words (a multiple
// of BKW) the block's i32 sums are folded into the f32 accumulators. Tiling as qgemm.wgsl,
// whose tile step is repeated inline: as a shared function taking the accumulators by pointer it
// compiles to slower code on NVIDIA.

override BM: u32 = 64u;
override BN: u32 = 64u;
override BKW: u32 = 8u;
override GW: u32 = 8u;
override TM: u32 = 4u;
override TN: u32 = 4u;
override ACC: u32 = 0u;
override WG: u32 = (BM / TM) * (BN / TN);
override BMP: u32 = BM + 4u;
override BNP: u32 = BN + 4u;
override AS_LEN: u32 = BKW * BMP / 4u;
override BS_LEN: u32 = BKW * BNP / 4u;

struct Params { M: u32, N: u32, KW: u32, KB: u32 }

@group(0) @binding(0) var<storage, read> AQ: array<u32>;
@group(0) @binding(1) var<storage, read> SA: array<f32>;
@group(0) @binding(2) var<storage, read> BQ: array<u32>;
@group(0) @binding(3) var<storage, read> SB: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;
@group(0) @binding(5) var<uniform> P: Params;

var<workgroup> As: array<vec4<u32>, AS_LEN>;
var<workgroup> Bs: array<vec4<u32>, BS_LEN>;

fn row_of(m0: u32, ty: u32, i: u32) -> u32 { return m0 + (i / 4u) * (BM * 4u / TM) + ty * 4u + i % 4u; }
fn col_of(n0: u32, tx: u32, h: u32) -> u32 { return n0 + h * (BN * 4u / TN) + tx * 4u; }

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let M = P.M;
  let N = P.N;
  let KW = P.KW;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let tx = lid % (BN / TN);
  let ty = lid / (BN / TN);

  var facc: array<vec4<f32>, 16>;   // TM*TN/4 used
  var acc: array<vec4<i32>, 16>;    // this block's exact sums, cleared by the fold
  for (var k0 = 0u; k0 < KW; k0 += BKW) {
    let kb = k0 / GW;
    for (var l = lid; l < BM * BKW; l += WG) {
      let r = l / BKW;
      let c = l % BKW;
      var w = 0u;
      if (m0 + r < M && k0 + c < KW) { w = AQ[(m0 + r) * KW + k0 + c]; }
      let f = c * BMP + r;
      As[f / 4u][f % 4u] = w;
    }
    for (var l = lid; l < BN * BKW; l += WG) {
      let r = l / BKW;
      let c = l % BKW;
      var w = 0u;
      if (n0 + r < N && k0 + c < KW) { w = BQ[(n0 + r) * KW + k0 + c]; }
      let f = c * BNP + r;
      Bs[f / 4u][f % 4u] = w;
    }
    workgroupBarrier();
    for (var k = 0u; k < BKW; k++) {
      var a: array<vec4<u32>, 2>;
      var b: array<vec4<u32>, 2>;
      for (var g = 0u; g < TM / 4u; g++) { a[g] = As[k * (BMP / 4u) + g * (BM / TM) + ty]; }
      for (var h = 0u; h < TN / 4u; h++) { b[h] = Bs[k * (BNP / 4u) + h * (BN / TN) + tx]; }
      for (var i = 0u; i < TM; i++) {
        let av = a[i / 4u][i % 4u];
        for (var h = 0u; h < TN / 4u; h++) {
          let bv = b[h];
          acc[i * (TN / 4u) + h] += vec4<i32>(dot4I8Packed(av, bv.x), dot4I8Packed(av, bv.y),
                                              dot4I8Packed(av, bv.z), dot4I8Packed(av, bv.w));
        }
      }
    }
    // Fold a finished block (a uniform branch): scales outside C are not read (those products are unused).
    if ((k0 + BKW) % GW == 0u) {
      for (var h = 0u; h < TN / 4u; h++) {
        let col = col_of(n0, tx, h);
        var sb = vec4<f32>();
        for (var c = 0u; c < 4u; c++) { if (col + c < N) { sb[c] = SB[(col + c) * P.KB + kb]; } }
        for (var i = 0u; i < TM; i++) {
          let row = row_of(m0, ty, i);
          let sa = select(0.0, SA[min(row, M - 1u) * P.KB + kb], row < M);
          facc[i * (TN / 4u) + h] += (vec4<f32>(acc[i * (TN / 4u) + h]) * sa) * sb;
          acc[i * (TN / 4u) + h] = vec4<i32>();
        }
      }
    }
    workgroupBarrier();
  }

  for (var i = 0u; i < TM; i++) {
    let row = row_of(m0, ty, i);
    if (row >= M) { continue; }
    for (var h = 0u; h < TN / 4u; h++) {
      let v = facc[i * (TN / 4u) + h];
      let col = col_of(n0, tx, h);
      for (var c = 0u; c < 4u; c++) {
        if (col + c < N) {
          let o = row * N + col + c;
          C[o] = select(v[c], C[o] + v[c], ACC != 0u);
        }
      }
    }
  }
}
