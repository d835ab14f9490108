// Second pass of a stream-K GEMM (matmul.ts streamKPlan, matmul.wgsl's STREAM_K blocks): the
// tiles of the stream-K region, whose k tiles were shared by several workgroups. Region workgroup w
// ran the k tiles [begin(w), begin(w + 1)) of the region's tiles laid end to end (ipt per tile,
// fewer than ipt per workgroup, so at most two tiles each) and left its raw sums in slot 2w (its
// first part) and 2w + 1 (its second) of the workspace, BM×BN floats each, row-major in the tile.
// Here C (+)= alpha · Σ of a tile's parts in workgroup order, which is k order: the same bits on
// every run (no atomics). Grid: [BM·BN / 1024, tiles of the region]; four floats per thread.

@group(0) @binding(0) var<storage, read> SKW: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> C: array<f32>;
struct Params {
  M: u32, N: u32, tilesX: u32, dpTiles: u32, ipt: u32, skQ: u32, skR: u32, accumulate: u32,
  alpha: f32, BM: u32, BN: u32, _p0: u32,
}
@group(0) @binding(2) var<uniform> P: Params;

// First k tile of region workgroup w: skQ each, one more for the first skR (skQ ≥ 1).
fn begin(w: u32) -> u32 { return w * P.skQ + min(w, P.skR); }

// The region workgroup that runs k tile x.
fn owner(x: u32) -> u32 {
  let big = P.skR * (P.skQ + 1u);
  if (x < big) { return x / (P.skQ + 1u); }
  return P.skR + (x - big) / P.skQ;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let e4 = wid.x * 256u + lid;             // vec4 of the tile (BN is a multiple of 4)
  if (e4 * 4u >= P.BM * P.BN) { return; }
  let first = wid.y * P.ipt;
  let w0 = owner(first);
  let w1 = owner(first + P.ipt - 1u);
  if (w0 == w1) { return; }                // one workgroup ran the whole tile and stored it
  let t = P.dpTiles + wid.y;
  let r = (t / P.tilesX) * P.BM + (e4 * 4u) / P.BN;
  let c = (t % P.tilesX) * P.BN + (e4 * 4u) % P.BN;
  if (r >= P.M || c >= P.N) { return; }
  var s = vec4<f32>(0.0);
  for (var w = w0; w <= w1; w++) {
    // The tile is w's first part when w starts inside it, else w's second.
    let slot = 2u * w + select(1u, 0u, begin(w) >= first);
    s += SKW[slot * (P.BM * P.BN / 4u) + e4];
  }
  let v = P.alpha * s;
  let i = r * P.N + c;
  for (var j = 0u; j < 4u; j++) {
    if (c + j < P.N) {
      if (P.accumulate != 0u) { C[i + j] = C[i + j] + v[j]; } else { C[i + j] = v[j]; }
    }
  }
}
