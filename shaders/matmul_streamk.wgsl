// Second pass of a stream-K GEMM (matmul.ts streamKCode, streamKPlan): the tiles of the stream-K
// region whose k iterations were shared by several workgroups. Workgroup w of the region ran the
// iterations [begin(w), begin(w + 1)) of the region's tiles laid end to end (ipt iterations per
// tile); a segment that covered a whole tile went to C directly, the others left their raw sums in
// slot 2w (the workgroup's first segment) or 2w + 1 (its last) of the workspace, BM×BN floats each.
// Here C (+)= alpha · Σ of a tile's segments in workgroup order, which is k order: the same bits
// on every run (no atomics). Grid: [ceil(BM·BN / 256), tiles of the region]; one float per thread.

@group(0) @binding(0) var<storage, read> SK: array<f32>;
@group(0) @binding(1) var<storage, read_write> C: array<f32>;
struct Params {
  M: u32, N: u32, tilesX: u32, dpTiles: u32, ipt: u32, skQ: u32, skR: u32, accumulate: u32,
  alpha: f32, BM: u32, BN: u32, _p0: u32,
}
@group(0) @binding(2) var<uniform> P: Params;

// First iteration of region workgroup w: skQ each, one more for the first skR (skQ ≥ 1).
fn begin(w: u32) -> u32 { return w * P.skQ + min(w, P.skR); }

// The region workgroup that runs iteration x.
fn owner(x: u32) -> u32 {
  let big = P.skR * (P.skQ + 1u);
  if (x < big) { return x / (P.skQ + 1u); }
  return P.skR + (x - big) / P.skQ;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let e = wid.x * 256u + lid;
  if (e >= P.BM * P.BN) { return; }
  let first = wid.y * P.ipt;
  let w0 = owner(first);
  let w1 = owner(first + P.ipt - 1u);
  if (w0 == w1) { return; }                // one workgroup ran the whole tile and stored it
  let t = P.dpTiles + wid.y;
  let r = (t / P.tilesX) * P.BM + e / P.BN;
  let c = (t % P.tilesX) * P.BN + e % P.BN;
  if (r >= P.M || c >= P.N) { return; }
  var s = 0.0;
  for (var w = w0; w <= w1; w++) {
    // The tile is w's first segment when w starts inside it, else w's last.
    let slot = 2u * w + select(1u, 0u, begin(w) >= first);
    s += SK[slot * P.BM * P.BN + e];
  }
  let v = P.alpha * s;
  let i = r * P.N + c;
  if (P.accumulate != 0u) { C[i] = C[i] + v; } else { C[i] = v; }
}
