// fp32-activation GEMM with quantized operands at either end:  C[M,N] = X[M,K] · Wᵀ,  W [N,K]
//   M = rows of X and C (tokens), N = rows of W (output channels), K = reduction length.
// qgemm-io.wgsl supplies two sections chosen per call (src/engine/kernels/qgemm.ts):
//   load_w_tile — fp32 W, or W group-quantized along K (INT8 / INT4 / NF4 / FP8) and dequantized while
//                 it is staged, 8 nibbles (or 4 bytes) of a u32 unpacked in registers, so no
//                 dequantized copy of W ever exists in global memory (ONNX Runtime MatMulNBits);
//   store_out   — fp32 C, or C group-quantized along N in the epilogue (activation storage).
// Bindings are named placeholders (an @ before the name) that qgemm.ts numbers in call order.
// X rows are read as vec4, so K % 4 == 0 (quantized W needs K % (codes per word) == 0 anyway).
//
// Block tile BM×BN, BK deep (a multiple of 8); each thread owns a TM×TN block (TM, TN ∈ {4, 8}):
// rows ty·TM + i and columns tx·TN + j, contiguous so that an output word (4 or 8 codes) and an
// output group (GQ columns = GQ/TN threads) belong to whole threads. Tiles are k-major in
// workgroup memory, rows padded by 4 floats; partial tiles are zero-filled.

override BM: u32 = 64u;
override BN: u32 = 64u;
override BK: u32 = 16u;
override TM: u32 = 4u;
override TN: u32 = 4u;
override WG: u32 = (BM / TM) * (BN / TN);
override BMP: u32 = BM + 4u;
override BNP: u32 = BN + 4u;
override XS_LEN: u32 = BK * BMP / 4u;
override WS_LEN: u32 = BK * BNP / 4u;

struct Params {
  M: u32,
  N: u32,
  K: u32,
  KG: u32,   // W scale groups per row (ceil(K / GW)); unused for fp32 W
  NG: u32,   // output scale groups per row (ceil(N / GQ)); unused for fp32 C
  _p0: u32,
  _p1: u32,
  _p2: u32,
}

@group(0) @binding(@X) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(@P) var<uniform> P: Params;

var<workgroup> Xs: array<vec4<f32>, XS_LEN>;
var<workgroup> Ws: array<vec4<f32>, WS_LEN>;

fn ws_set(k: u32, n: u32, v: f32) {
  let f = k * BNP + n;
  Ws[f / 4u][f % 4u] = v;
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let M = P.M;
  let K = P.K;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let tx = lid % (BN / TN);
  let ty = lid / (BN / TN);

  var acc: array<vec4<f32>, 16>;   // TM*TN/4 used; acc[i*(TN/4) + h][e] = C(row i, col 4h+e)
  for (var k0 = 0u; k0 < K; k0 += BK) {
    for (var l = lid; l < BM * BK / 4u; l += WG) {
      let r = l / (BK / 4u);
      let c = (l % (BK / 4u)) * 4u;
      var v = vec4<f32>(0.0);
      if (m0 + r < M && k0 + c < K) { v = X[((m0 + r) * K + k0 + c) / 4u]; }
      for (var e = 0u; e < 4u; e++) {
        let f = (c + e) * BMP + r;
        Xs[f / 4u][f % 4u] = v[e];
      }
    }
    load_w_tile(n0, k0, lid);
    workgroupBarrier();
    for (var k = 0u; k < BK; k++) {
      var a: array<vec4<f32>, 2>;
      var b: array<vec4<f32>, 2>;
      for (var g = 0u; g < TM / 4u; g++) { a[g] = Xs[k * (BMP / 4u) + ty * (TM / 4u) + g]; }
      for (var h = 0u; h < TN / 4u; h++) { b[h] = Ws[k * (BNP / 4u) + tx * (TN / 4u) + h]; }
      for (var i = 0u; i < TM; i++) {
        let av = a[i / 4u][i % 4u];
        for (var h = 0u; h < TN / 4u; h++) { acc[i * (TN / 4u) + h] += av * b[h]; }
      }
    }
    workgroupBarrier();
  }
  store_out(&acc, m0 + ty * TM, n0 + tx * TN, tx, ty);
}
