// Tiled, register-blocked fp32 GEMM:  C[M,N] (+)= alpha * op(A)[M,K] · op(B)[K,N]
//   M = rows of C (tokens B·T, or features for dW), N = columns of C, K = reduction length.
//   op(A) = A stored [M,K] row-major, or A stored [K,M] when TRANS_A (then op(A) = Aᵀ).
//   op(B) = B stored [K,N] row-major, or B stored [N,K] when TRANS_B (the HF [out,in] weight).
// The I/O helpers loadA4 / loadB4 / storeC4 and the bindings come from matmul_io.wgsl, chosen
// per call in TS: vec4 (16-byte) global access where the contiguous dimension is a multiple of
// 4, scalar with per-element bounds checks otherwise (the vocab-65 GEMMs).
//
// Block tile BM×BN per workgroup, BK deep; each thread owns a TM×TN micro tile (TM, TN ∈ {4, 8})
// held as TM·TN/4 vec4 accumulators. A thread's rows are ty*4 + g*(BM*4/TM) + {0..3}: split into
// groups of 4 spaced BM*4/TM apart so that a warp's vec4 reads of a k-row of the A and B tiles are
// distinct consecutive 16-byte words (conflict-free) or broadcasts.
//
// Workgroup memory holds both tiles k-major (As[k][m], Bs[k][n]) so the inner loop reads vec4
// along m and n whatever the transposes; rows are padded by 4 floats so the transposing scalar
// stores of the [M,K] / [N,K] layouts spread over all banks while vec4 alignment is kept. Two
// buffers alternate: the next tile is fetched into registers before the FMAs on the current one
// and stored to the other buffer after them, so one barrier per BK step suffices and the global
// latency hides behind the arithmetic.

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ACCUM: bool = false;
override BM: u32 = 128u;
override BN: u32 = 128u;
override BK: u32 = 8u;
override TM: u32 = 8u;
override TN: u32 = 8u;

override WG: u32 = (BM / TM) * (BN / TN);
override BMP: u32 = BM + 4u;                     // padded row lengths (floats)
override BNP: u32 = BN + 4u;
override AS_LEN: u32 = 2u * BK * BMP / 4u;       // vec4 count, two buffers
override BS_LEN: u32 = 2u * BK * BNP / 4u;
override A_GROUPS: u32 = BM * BK / 4u;           // vec4 groups per tile
override B_GROUPS: u32 = BN * BK / 4u;
override LDA: u32 = (A_GROUPS + WG - 1u) / WG;  // groups per thread (≤ 4, checked in TS)
override LDB: u32 = (B_GROUPS + WG - 1u) / WG;

struct Params { M: u32, N: u32, K: u32, alpha: f32 }
@group(0) @binding(3) var<uniform> P: Params;

var<workgroup> As: array<vec4<f32>, AS_LEN>;
var<workgroup> Bs: array<vec4<f32>, BS_LEN>;

// Tile (r, c) coordinates of vec4 group g in the stored layout; c counts floats.
fn groupRC(g: u32, colsInTile: u32) -> vec2<u32> {
  return vec2<u32>(g / (colsInTile / 4u), (g % (colsInTile / 4u)) * 4u);
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let M = P.M;
  let N = P.N;
  let K = P.K;
  let m0 = wid.y * BM;
  let n0 = wid.x * BN;
  let tx = lid % (BN / TN);
  let ty = lid / (BN / TN);
  let aRows = select(M, K, TRANS_A);
  let aCols = select(K, M, TRANS_A);
  let bRows = select(K, N, TRANS_B);
  let bCols = select(N, K, TRANS_B);

  var acc: array<vec4<f32>, 16>;   // TM*TN/4 ≤ 16 used
  var ra: array<vec4<f32>, 4>;
  var rb: array<vec4<f32>, 4>;
  let nt = (K + BK - 1u) / BK;

  for (var t = 0u; t <= nt; t++) {
    // Stage 1: fetch tile t into registers (global loads in flight during the FMAs below).
    if (t < nt) {
      let k0 = t * BK;
      for (var l = 0u; l < LDA; l++) {
        let g = lid + l * WG;
        if (g < A_GROUPS) {
          if (TRANS_A) {
            let rc = groupRC(g, BM);   // stored [K,M]: r = k, c = m
            ra[l] = loadA4(k0 + rc.x, m0 + rc.y, aRows, aCols);
          } else {
            let rc = groupRC(g, BK);   // stored [M,K]: r = m, c = k
            ra[l] = loadA4(m0 + rc.x, k0 + rc.y, aRows, aCols);
          }
        }
      }
      for (var l = 0u; l < LDB; l++) {
        let g = lid + l * WG;
        if (g < B_GROUPS) {
          if (TRANS_B) {
            let rc = groupRC(g, BK);   // stored [N,K]: r = n, c = k
            rb[l] = loadB4(n0 + rc.x, k0 + rc.y, bRows, bCols);
          } else {
            let rc = groupRC(g, BN);   // stored [K,N]: r = k, c = n
            rb[l] = loadB4(k0 + rc.x, n0 + rc.y, bRows, bCols);
          }
        }
      }
    }

    // Stage 2: FMAs on tile t-1 (buffer (t-1)&1), while tile t's loads are outstanding.
    if (t > 0u) {
      let aBase = ((t - 1u) & 1u) * (BK * BMP / 4u) + ty;
      let bBase = ((t - 1u) & 1u) * (BK * BNP / 4u) + tx;
      for (var k = 0u; k < BK; k++) {
        var a: array<vec4<f32>, 2>;
        var b: array<vec4<f32>, 2>;
        for (var g = 0u; g < TM / 4u; g++) { a[g] = As[aBase + k * (BMP / 4u) + g * (BM / TM)]; }
        for (var h = 0u; h < TN / 4u; h++) { b[h] = Bs[bBase + k * (BNP / 4u) + h * (BN / TN)]; }
        for (var i = 0u; i < TM; i++) {
          let av = a[i / 4u][i % 4u];
          for (var h = 0u; h < TN / 4u; h++) {
            acc[i * (TN / 4u) + h] += av * b[h];
          }
        }
      }
    }

    // Stage 3: tile t into buffer t&1. Its last readers were the FMAs of tile t-2, which ended
    // before the previous iteration's barrier.
    if (t < nt) {
      let buf = t & 1u;
      for (var l = 0u; l < LDA; l++) {
        let g = lid + l * WG;
        if (g < A_GROUPS) {
          if (TRANS_A) {
            let rc = groupRC(g, BM);
            As[(buf * BK * BMP + rc.x * BMP + rc.y) / 4u] = ra[l];
          } else {
            let rc = groupRC(g, BK);   // transposing store: four k-rows, one m column
            for (var e = 0u; e < 4u; e++) {
              let f = buf * BK * BMP + (rc.y + e) * BMP + rc.x;
              As[f / 4u][f % 4u] = ra[l][e];
            }
          }
        }
      }
      for (var l = 0u; l < LDB; l++) {
        let g = lid + l * WG;
        if (g < B_GROUPS) {
          if (TRANS_B) {
            let rc = groupRC(g, BK);
            for (var e = 0u; e < 4u; e++) {
              let f = buf * BK * BNP + (rc.y + e) * BNP + rc.x;
              Bs[f / 4u][f % 4u] = rb[l][e];
            }
          } else {
            let rc = groupRC(g, BN);
            Bs[(buf * BK * BNP + rc.x * BNP + rc.y) / 4u] = rb[l];
          }
        }
      }
    }
    workgroupBarrier();
  }

  for (var g = 0u; g < TM / 4u; g++) {
    for (var e = 0u; e < 4u; e++) {
      let row = m0 + g * (BM * 4u / TM) + ty * 4u + e;
      for (var h = 0u; h < TN / 4u; h++) {
        let col = n0 + h * (BN * 4u / TN) + tx * 4u;
        storeC4(row, col, P.alpha * acc[(g * 4u + e) * (TN / 4u) + h], M, N);
      }
    }
  }
}
