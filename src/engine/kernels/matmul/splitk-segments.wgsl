// Second pass of several split-K GEMMs at once (matmul.ts splitKReduceSegments): segment j's GEMM left
// its S_j raw partial products [S_j, size_j] at W[ws_j..]; here C[c_j + i] = alpha · Σ_s W[ws_j + s·size_j + i],
// the slices summed in order as splitk.wgsl sums them (the same bits as the GEMM's own reduce).
// Threads run over the segments' elements laid end to end; grid 2-D as splitk.wgsl's.

@group(0) @binding(0) var<storage, read> W: array<f32>;
@group(0) @binding(1) var<storage, read_write> C: array<f32>;
// total = Σ size_j; seg[j] = (c, size, parts, ws).
struct Params { total: u32, count: u32, alpha: f32, _p0: u32, seg: array<vec4<u32>, 15> }
@group(0) @binding(2) var<uniform> P: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  var i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= P.total) { return; }
  var j = 0u;
  loop {
    if (j + 1u >= P.count || i < P.seg[j].y) { break; }
    i -= P.seg[j].y;
    j++;
  }
  let g = P.seg[j];
  var s = W[g.w + i];
  for (var p = 1u; p < g.z; p++) { s += W[g.w + p * g.y + i]; }
  C[g.x + i] = P.alpha * s;
}
